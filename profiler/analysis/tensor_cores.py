"""Tensor cores as the PyTorch profiler's TensorBoard plugin counted them (docs/tensorboard.md).

A kernel "uses tensor cores" when its name contains one of the substrings NVIDIA's PyProf listed
for tensor-core kernels (cuBLAS / CUTLASS tile shapes such as `s1688`, `h884`, `i8816`; cuDNN's
`xmma` kernels ...), as the plugin had it, or when profview's precision rules read a tensor-core
kernel in it (analysis/kernel_families.py: Ampere's `sm80_xmma_fprop_implicit_gemm_..._tf32f32...`
and CUTLASS `tensorop` kernels, which the plugin's list predates and would call ordinary kernels).
An operator is "tensor-core eligible" when it is one of the framework operators that can run on
tensor cores (convolutions, matrix products, recurrent cells and their backward ops).
"""

from __future__ import annotations

import numpy as np

from profiler.analysis.kernel_families import kernel_precision
from profiler.kernels.grouping import text_matches

#: Substrings of the names of kernels that run on tensor cores (PyProf's list, as the plugin used it).
TENSOR_CORE_KERNEL_MARKS = (
    "h884",
    "s884",
    "h1688",
    "s1688",
    "c1688",
    "hmma",
    "i8816",
    "16816",
    "dgrad_1x1_stride_2x2",
    "first_layer_wgrad_kernel",
    "conv1x1",
    "conv2d_c1_k1",
    "direct_group",
    "xmma_implicit_gemm",
    "xmma_sparse_conv",
    "xmma_warp_specialized_implicit_gemm",
    "xmma_gemm",
    "xmma_sparse_gemm",
)

#: Framework operators that can run on tensor cores: the forward ops by their aten names, the
#: backward ops by the names their autograd nodes and aten calls have in traces.
TENSOR_CORE_ELIGIBLE_OPS = frozenset(
    [f"aten::{name}" for name in ("conv1d", "conv2d", "conv3d", "conv_tbc", "convolution", "_convolution")]
    + [f"aten::conv_transpose{d}d" for d in (1, 2, 3)]
    + [
        "aten::_convolution_nogroup",
        "aten::cudnn_convolution",
        "aten::cudnn_convolution_transpose",
        "aten::cudnn_convolution_backward",
        "aten::cudnn_convolution_backward_input",
        "aten::cudnn_convolution_backward_weight",
        "aten::cudnn_convolution_transpose_backward",
        "aten::cudnn_convolution_transpose_backward_input",
        "aten::cudnn_convolution_transpose_backward_weight",
        "CudnnConvolutionBackward",
        "CudnnConvolutionTransposeBackward",
    ]
    + [f"aten::{name}" for name in ("addmm", "addmm_", "addmv", "addr", "matmul", "mm", "mv", "linear")]
    + [f"aten::{name}" for name in ("addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot", "prelu")]
    + ["AddmmBackward", "AddmvBackward", "AddbmmBackward", "MmBackward", "MvBackward", "BmmBackward0"]
    + [f"aten::{name}" for name in ("lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell")]
    + ["aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_gru_cell"]
)


def uses_tensor_cores(name: str) -> bool:
    """Whether a kernel of this name runs on tensor cores (TENSOR_CORE_KERNEL_MARKS, or its precision)."""
    return any(mark in name for mark in TENSOR_CORE_KERNEL_MARKS) or kernel_precision(name) == "tensor_core"


def tensor_core_kernels(names) -> np.ndarray:
    """`uses_tensor_cores` of every name of a column (a categorical, or any values): one test per distinct name."""
    return text_matches(names, uses_tensor_cores)


def is_tensor_core_eligible(op_name: str) -> bool:
    """Whether a framework operator of this name can run on tensor cores (TENSOR_CORE_ELIGIBLE_OPS)."""
    return op_name in TENSOR_CORE_ELIGIBLE_OPS
