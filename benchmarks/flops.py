"""Matrix-multiply FLOPs of a model's steps and this machine's GEMM rate: the floor under a run's time.

``torch.utils.flop_counter.FlopCounterMode`` counts the multiply-adds of ``mm``, ``bmm``, ``baddbmm``,
``addmm`` and convolutions (2 FLOPs each); softmax's CPU kernel (``_scaled_dot_product_flash_attention_for_cpu``
and its backward) is added here with torch's own SDPA formulas, since torch registers only the GPU kernels.
Elementwise work (dropout, GELU, layer norm, the optimizer) is not counted: the floor is what the matrix
multiplies alone would take at the machine's rate.
"""

from __future__ import annotations

import time

import torch
from torch.utils import flop_counter

_aten = torch.ops.aten


def _sdpa_cpu(query, key, value, *args, out_shape=None, **kwargs) -> int:  # the arguments' shapes
    return flop_counter.sdpa_flop_count(query, key, value)


def _sdpa_cpu_backward(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    return flop_counter.sdpa_backward_flop_count(grad_out, query, key, value)


CPU_SDPA = {_aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_cpu,
            _aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_cpu_backward}


def counter() -> flop_counter.FlopCounterMode:
    """A silent FLOP counter that also counts softmax attention's CPU kernel."""
    return flop_counter.FlopCounterMode(display=False, custom_mapping=CPU_SDPA)


def gemm_gflops(size: int = 1024, repeats: int = 20) -> float:
    """GFLOP/s of one ``size``-square float32 matmul on the current thread count: the machine's rate."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b  # first call: allocation, packing buffers
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - started) / 1e9
