"""The advisor's words: which op families are avoidable, and what to do about each finding, per framework.

Kept apart from the rules (advisor.py) so the logic reads on one screen and the advice can be
edited without touching it. Frameworks: torch, mindspore, plain (Python with profview markers).
"""
from __future__ import annotations

import re

#: Avoidable op families: name pattern, label, and the suggestion per framework.
OP_FAMILIES: dict[str, tuple[re.Pattern, str, dict[str, str]]] = {
    "cast": (
        re.compile(r"(?i)(?:^cast\b|^cast-|/cast|aten::(?:to|_to_copy|copy_|type_as)$|tocopybackward|copy_kernel)"),
        "Cast (dtype conversion)",
        {"torch": "keep one dtype through the model: remove .double() / .float() / .to(dtype) around layers "
                  "(each one is a copy forward and again in backward); for speed use mixed precision "
                  "(torch.autocast(device_type, dtype=torch.bfloat16 or float16)) rather than manual casts",
         "mindspore": "set the network's precision once (Model(net, amp_level='O2' / 'O3'), or .to_float(mstype."
                      "float16)) so Cast ops disappear, and enable graph-kernel fusion "
                      "(set_context(enable_graph_kernel=True)) to fuse the rest",
         "plain": "keep arrays in one dtype end to end; convert once at load time instead of in every step"},
    ),
    "norm": (
        re.compile(r"(?i)(?:batch_?norm|bntraining|bninfer|\bbn_(?:fw|bw)|layer_?norm|group_?norm|instance_?norm)"),
        "BatchNorm / normalisation",
        {"torch": "run normalisation in the model's dtype (never float64), use channels_last memory format and "
                  "torch.compile to fuse BatchNorm + ReLU, or mixed precision (torch.autocast); for inference, "
                  "fold BatchNorm into the preceding conv (torch.ao.quantization.fuse_modules)",
         "mindspore": "mixed precision (amp_level='O2') and graph-kernel fusion (set_context(enable_graph_kernel="
                      "True)) fuse BNTrainingReduce / BNTrainingUpdate with their neighbours",
         "plain": "fuse the normalisation with its neighbouring ops, or compute it in a lower precision"},
    ),
    "layout": (
        re.compile(r"(?i)(?:transdata|^transpose|aten::contiguous$)"),
        "layout transforms (TransData / transpose)",
        {"torch": "keep one memory format end to end (model.to(memory_format=torch.channels_last) together with "
                  "the inputs) so tensors are not re-laid out between ops",
         "mindspore": "TransData converts between NCHW and the device format: keep shapes / dtypes stable, use "
                      "mixed precision consistently and graph mode so the compiler removes the conversions",
         "plain": "keep one memory layout end to end instead of transposing between ops"},
    ),
}

SUGGESTIONS: dict[str, dict[str, str]] = {
    "input_bound": {
        "torch": "load batches ahead in background workers: DataLoader(..., num_workers=N (the free cores), "
                 "prefetch_factor=2-4, persistent_workers=True, pin_memory=True on a GPU); move per-sample "
                 "Python work into the Dataset so the workers do it",
        "mindspore": "parallelise the dataset pipeline (.map(..., num_parallel_workers=N), .batch(..., "
                     "num_parallel_workers=N)), run Python transforms in processes "
                     "(dataset.map(..., python_multiprocessing=True); GeneratorDataset(..., num_parallel_workers=N, "
                     "python_multiprocessing=True)), and train in data sink mode (model.train(..., "
                     "dataset_sink_mode=True), Ascend / GPU) so batches queue on the device ahead of each step",
        "plain": "prefetch batches on a background thread (for batch in profiler.prefetch(loader): ...) so "
                 "loading overlaps the step, or make the loading itself cheaper",
    },
    "transmission_bound": {
        "torch": "batches are ready on the host but reach the device late: pin_memory=True in the DataLoader and "
                 ".to(device, non_blocking=True), and copy the next batch on a side stream while this one "
                 "computes",
        "mindspore": "use data sink mode with a deeper device queue (dataset_sink_mode=True, sink_size) so "
                     "host-to-device transfer overlaps the previous step",
        "plain": "the data is ready but its transfer is not: make the device queue deeper or copy the next "
                 "batch in the background while this one computes",
    },
    "host_gap": {
        "torch": "the gap is host work, not data: move per-step Python work (metrics, .item() / .cpu() syncs, "
                 "logging) out of the loop or do it every N steps",
        "mindspore": "the gap is host work, not data: move per-step Python callbacks (metrics, logging) out of "
                     "the loop, or use sink mode so the device runs several steps per host call",
        "plain": "the gap is host work between steps, not data loading: move it out of the loop or do it "
                 "every N steps",
    },
    "gap_bound": {
        "torch": "measure the data wait to tell a slow loader from slow host code: iterate "
                 "ProfiledDataLoader(loader) instead of the DataLoader (or use profview run); if it is the "
                 "loader, add DataLoader workers (num_workers, prefetch_factor, persistent_workers), else move "
                 "per-step Python work (metrics, .item() syncs, logging) out of the loop",
        "mindspore": "the time between steps is data loading or host callbacks: check the data queue "
                     "(minddata pipeline files), train in data sink mode, and move per-step callbacks out of the loop",
        "plain": "measure the data wait to tell a slow loader from slow host code: iterate profiler.prefetch(loader) "
                 "(or put batches through a ProfiledQueue); if it is the loader, load ahead on background threads",
    },
    "memory_growth": {
        "torch": "something keeps references across steps: accumulate loss.item(), not loss (a tensor keeps its "
                 "autograd graph), detach and move to the CPU what you keep for logging, clear lists of "
                 "outputs; tracemalloc (host) or torch.cuda.memory._record_memory_history() (GPU) shows who allocates",
        "mindspore": "something keeps references across steps (outputs or losses kept in a list, a growing "
                     "cache): keep scalars (asnumpy()) instead of tensors and clear what you keep for logging",
        "plain": "something keeps references across steps (a list or cache that only grows): keep only what you "
                 "need, as plain numbers; tracemalloc shows who allocates",
    },
    "host_bound": {
        "torch": "many tiny ops leave the device (or the core) waiting for the framework: use a larger batch, "
                 "torch.compile(model) (or CUDA graphs) to remove per-op dispatch, and fuse small elementwise ops",
        "mindspore": "run in graph mode (set_context(mode=GRAPH_MODE)) with graph-kernel fusion, and a larger "
                     "batch, so the host launches fewer, larger ops",
        "plain": "the step is dominated by per-op overhead: batch the work into fewer, larger array operations",
    },
    "op_dominant": {
        "torch": "this is where the compute goes: to go faster make it cheaper — mixed precision (torch.autocast), "
                 "channels_last, torch.compile, a better-shaped batch, or faster hardware",
        "mindspore": "this is where the compute goes: to go faster make it cheaper — mixed precision (amp_level="
                     "'O2'), graph mode with graph-kernel fusion, a better-shaped batch, or faster hardware",
        "plain": "this is where the compute goes: to go faster make it cheaper — a faster library or kernel, lower "
                 "precision, better-shaped arrays, or faster hardware",
    },
    "tail_bound": {
        "torch": "the time after backward is the optimizer and per-step extras: use a fused / foreach optimizer "
                 "(torch.optim.AdamW(..., fused=True)), and log, sync (.item()) or checkpoint less often",
        "mindspore": "the time after backward is the optimizer and callbacks: use a fused optimizer, and log or "
                     "save checkpoints less often (CheckpointConfig(save_checkpoint_steps=...))",
        "plain": "the work after the last backward compute (update, logging, checkpointing) is large: fuse the "
                 "update, and log or checkpoint less often",
    },
    "comm_bound": {
        "torch": "overlap the gradient all-reduce with backward: DistributedDataParallel buckets it already; "
                 "tune bucket_cap_mb, set gradient_as_bucket_view=True, and use no_sync() for gradient "
                 "accumulation micro-batches",
        "mindspore": "fuse and overlap the all-reduce (set_auto_parallel_context(all_reduce_fusion_config=[...]) "
                     "or comm_fusion) and check the network between the ranks",
        "plain": "overlap communication with compute (start the all-reduce of early layers' gradients during "
                 "backward) and bucket small tensors into larger messages",
    },
    "step_outliers": {
        "torch": "find the periodic work (evaluation, checkpoint saving, logging, garbage collection): do it less "
                 "often or asynchronously, and gc.freeze() after start-up",
        "mindspore": "find the periodic work (evaluation, checkpoint saving, logging callbacks): save or log less "
                     "often, or asynchronously",
        "plain": "find the periodic work (evaluation, checkpoint saving, logging, garbage collection) and do it "
                 "less often or asynchronously",
    },
    "profiler_overhead": {
        "torch": "record less: capture ops on a few steps only (Profiler(ops_schedule=schedule(wait=..., "
                 "active=3))), keep record_shapes / with_stack off, and no spans inside tight inner loops",
        "mindspore": "record less: profile a few steps with a schedule and keep spans out of tight inner loops",
        "plain": "record less: a schedule(wait=..., active=...) window, and no op() / span() in tight inner loops",
    },
    "dropped_events": {
        fw: "give the recording room between flushes: raise memory_budget_mb (Profiler(memory_budget_mb=...)), or "
            "flush more often (a smaller flush_interval_s); record fewer spans in tight inner loops"
        for fw in ("torch", "mindspore", "plain")
    },
    "damaged_raw_store": {
        fw: "the raw store was damaged after it was written (a killed run tears at most its last chunk): keep the "
            "raw/ files whole when copying them (no partial copies, no editing), and re-run `profview analyse`"
        for fw in ("torch", "mindspore", "plain")
    },
}
