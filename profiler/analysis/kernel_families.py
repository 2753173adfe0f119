"""What a device kernel is, from its name: its family (GEMM, convolution, elementwise, normalisation,
communication, memory, other) and the precision it computes in (float64, float32 on the ordinary
cores, tensor cores, half precision).

Kernel names are the vendor libraries' (cuBLAS `ampere_sgemm_128x64_nn`, cuDNN
`cudnn_ampere_scudnn_128x64_relu...`, CUTLASS `cutlass_80_tensorop_s1688gemm...`, cuDNN's xmma
`sm80_xmma_fprop_implicit_gemm_indexed_tf32f32...`) and PyTorch's (`at::native::vectorized_elementwise_kernel
<4, at::native::CUDAFunctor_add<float> ...>`): the patterns below read the conventions those names follow.
Pure: one regex test per distinct name.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from profiler.spill import chunked, chunks

#: Kernel families in the order they are tested: the first that matches names the family (a
#: convolution's `implicit_gemm` is a convolution, not a GEMM). `comm` and `memory` come from the
#: execution's category first (model.DEVICE_WORK_CATEGORIES).
FAMILIES: tuple[tuple[str, re.Pattern], ...] = (
    ("comm", re.compile(r"(?i)nccl|rccl|hccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|send_?recv")),
    (
        "convolution",
        re.compile(
            r"(?i)conv|fprop|dgrad|wgrad|scudnn|hcudnn|implicit_?gemm|winograd|fft2d|gcgemm"
            r"|im2col|col2im"
        ),
    ),
    (
        "normalisation",
        re.compile(
            r"(?i)batch_?norm|\bbn_|[_:]bn_(?:fw|bw)|layer_?norm|group_?norm|instance_?norm"
            r"|rms_?norm|welford"
        ),
    ),
    ("gemm", re.compile(r"(?i)(?<!fb)gemm|gemv|matmul|cublas|cutlass|bmm_|_mm_|\bdot_kernel|splitKreduce")),
    ("elementwise", re.compile(r"(?i)elementwise|pointwise|vectorized|unrolled|triton_poi|multi_tensor_apply")),
)
#: The families whose precision the tensor cores change (the matrix engines' work).
MATRIX_FAMILIES = ("gemm", "convolution")

#: Precisions, tested in this order on every kernel name.
PRECISIONS: tuple[tuple[str, re.Pattern], ...] = (
    # float64: cuBLAS d/z GEMMs, templates instantiated on double (`CUDAFunctor_add<double>`).
    (
        "fp64",
        re.compile(
            r"(?i)dgemm|zgemm|dgemv|fp64|_f64|(?<!optional)<\s*double\b|(?<!optional<)\bdouble\s*>|c10::complex<double"
        ),
    ),
    # tensor cores: cuBLAS / CUTLASS shapes (h884, s1688, h16816, i8816), CUTLASS `tensorop`, cuDNN's
    # xmma kernels in tf32 / f16 / bf16, `*_fp16_*` / `*_bf16_*` library kernels, wmma / hmma.
    (
        "tensor_core",
        re.compile(
            r"(?i)[hsi](?:884|1688|16816|8816)|tensorop|tensor\d+x\d+x\d+|_tf32|tf32f32|hmma|wmma"
            r"|_(?:fp16|bf16|f16)_|(?:fp16|bf16|f16)(?:f16|f32|bf16)|xmma.*(?:f16|bf16|tf32)"
        ),
    ),
    # half precision on the ordinary cores: hgemm, c10::Half / BFloat16 templates.
    ("half", re.compile(r"(?i)hgemm|c10::Half|BFloat16|__half|__nv_bfloat16")),
    # float32 on the ordinary cores: cuBLAS s / c GEMMs, cuDNN's s-kernels, float templates.
    ("fp32", re.compile(r"(?i)sgemm|sgemv|cgemm|gcgemm|scudnn|<\s*float\b|\bfloat\s*>|_f32\b")),
)


def kernel_family(name: str, category: str = "compute") -> str:
    """The family of one kernel: comm / memory by category (or a collective's name), else the first
    FAMILIES pattern its name matches, else "other"."""
    if category == "comm":
        return "comm"
    if category in ("memcpy", "memset"):
        return "memory"
    return next((family for family, pattern in FAMILIES if pattern.search(name)), "other")


def kernel_precision(name: str) -> str:
    """The precision a kernel computes in (PRECISIONS), "" when its name does not say."""
    return next((precision for precision, pattern in PRECISIONS if pattern.search(name)), "")


#: Executions coded at a time by `classify` (its temporaries: ~20 B per execution of a chunk, not of the run).
CLASSIFY_ROWS = 1 << 18


def classify(executions: pd.DataFrame) -> pd.DataFrame:
    """`family` and `precision` of every execution (columns `name`, `category`), one test per distinct
    (name, category): the executions with the two columns added, as categoricals (a code per execution,
    not its text: a big trace has millions; in spill files when spilling), coded CLASSIFY_ROWS at a time."""
    name, category = _categorical(executions["name"]), _categorical(executions["category"])
    width = len(category.categories) + 1

    def pair(at: slice) -> np.ndarray:
        return name.codes[at].astype(np.int64) * width + category.codes[at]

    n = len(executions)
    pairs = np.unique(
        np.concatenate([np.empty(0, np.int64), *(np.unique(pair(at)) for at in chunks(n, CLASSIFY_ROWS))])
    )
    names = [str(name.categories[p // width]) for p in pairs]
    categories = [str(category.categories[p % width]) for p in pairs]
    family = np.array([kernel_family(n, c) for n, c in zip(names, categories)], dtype=object)
    precision = np.array([kernel_precision(n) for n in names], dtype=object)
    added = {"family": _of_rows(family, pairs, pair, n), "precision": _of_rows(precision, pairs, pair, n)}
    return pd.DataFrame({**{c: executions[c] for c in executions.columns}, **added}, copy=False)  # assign copies


def _categorical(column: pd.Series) -> pd.Categorical:
    """The column as a categorical: its own when it is one (no copy of its codes)."""
    return column.array if isinstance(column.dtype, pd.CategoricalDtype) else pd.Categorical(column)


def _of_rows(values: np.ndarray, pairs: np.ndarray, pair, n: int) -> pd.Categorical:
    """values[k] of each row's (name, category) pair `pairs[k]` (`pair(positions)`: the rows' pairs), as a
    categorical whose categories are in sorted order, so that it groups and sorts as the text would."""
    labels, code = np.unique(values.astype(str), return_inverse=True)
    dtype = np.int8 if len(labels) < np.iinfo(np.int8).max else np.int16  # a few families / precisions
    codes = chunked(n, dtype, lambda at: code[np.searchsorted(pairs, pair(at))], CLASSIFY_ROWS)
    return pd.Categorical.from_codes(codes, categories=labels.astype(object))
