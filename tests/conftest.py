"""Shared test helpers: deterministic seeds, a relative-RMSE comparison (as in fla's tests) and a comparison
within the float rounding bound of a computation (what a BLAS or vector kernel promises on any CPU)."""

from __future__ import annotations

import os

# before torch loads: idle OpenMP threads sleep, not spin; a fixed thread count (a caller's on a busy machine,
# else 2, or 1 in each pytest-xdist worker: `-n auto` runs one worker a core) so that runs inside tests never change
# it (lra.run.threads) and numbers stay deterministic
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if "OMP_NUM_THREADS" not in os.environ or os.environ.get("LRA_TESTS_CHOSE_THREADS"):  # the caller's stays
    os.environ["LRA_TESTS_CHOSE_THREADS"] = "1"  # xdist's controller loads this file first; its workers inherit
    os.environ["OMP_NUM_THREADS"] = "1" if os.environ.get("PYTEST_XDIST_WORKER") else "2"

import pytest  # noqa: E402
import torch  # noqa: E402


def assert_close(ref: torch.Tensor, out: torch.Tensor, ratio: float = 1e-4, atol: float = 1e-6, what: str = ""):
    """Relative RMSE ``rms(ref - out) / rms(ref)`` below ``ratio`` (or tiny absolute error); no NaN."""
    assert torch.isfinite(out).all(), f"{what}: non-finite values"
    err = (ref.double() - out.double()).pow(2).mean().sqrt()
    scale = ref.double().pow(2).mean().sqrt()
    if (ref.double() - out.double()).abs().max() <= atol:
        return
    assert err <= ratio * scale, f"{what}: relative RMSE {float(err / scale):.2e} > {ratio:.0e}"


def rounding_bound(roundings: int, dtype: torch.dtype = torch.float32) -> float:
    """Higham's ``gamma_n = n u / (1 - n u)``, ``u = eps / 2`` of ``dtype``, for ``n = roundings``.

    A float result whose every term passes through at most ``n`` roundings (an input cast to ``dtype``: 1; a dot
    product or sum of ``d`` terms: ``d``, in any order or blocking, fused multiply-adds or not) is within
    ``gamma_n`` times the same computation on absolute values of the exact result. That bound is all a BLAS or a
    vectorised kernel promises: the last bits depend on the CPU's code path (MKL, oneDNN and ATen's kernels
    choose by instruction set), so tests compare against it, never against one machine's bits.
    """
    u = torch.finfo(dtype).eps / 2
    assert roundings * u < 0.5, "too many roundings for a meaningful bound"
    return roundings * u / (1 - roundings * u)


def assert_within_rounding(exact: torch.Tensor, out: torch.Tensor, magnitude: torch.Tensor, roundings: int,
                           dtype: torch.dtype = torch.float32, what: str = ""):
    """``|out - exact| <= rounding_bound(roundings, dtype) * magnitude`` elementwise, no NaN.

    ``exact``: the result in float64 (to within far less than the bound); ``magnitude``: the same computation on
    the inputs' absolute values (for a sum of products, the sum of the products' absolute values).
    """
    assert torch.isfinite(out).all(), f"{what}: non-finite values"
    bound = rounding_bound(roundings, dtype) * magnitude.double()
    excess = (out.double() - exact.double()).abs() / bound.clamp_min(torch.finfo(torch.float64).tiny)
    worst = float(excess.max())
    assert worst <= 1, f"{what}: off by {worst:.2f} times the rounding bound of {roundings} roundings"


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def random_qkv_mask(b: int = 2, h: int = 2, n: int = 20, d: int = 8, real: int | None = None, row: int = -1):
    """Random ``q, k, v`` ``(B, H, N, D)`` and a key mask whose batch row ``row`` is real up to ``real``."""
    q, k, v = torch.randn(3, b, h, n, d).unbind(0)
    mask = torch.ones(b, n, dtype=torch.bool)
    mask[row, (n - 6 if real is None else real):] = False
    return q, k, v, mask


def saved_bytes(fn, *inputs) -> int:
    """Bytes of the distinct storages autograd saves for backward while ``fn(*inputs)`` runs."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs)
    return sum(storages.values())
