"""The 16-bit dropout masks: their rate, their reproducibility from torch's RNG state, and their application by
multiplication, against the plain composition ``where(kept, x * scale, 0)``."""

from __future__ import annotations

import math

import pytest
import torch

from lra.dropout import (
    Dropout,
    add_masked,
    apply_mask,
    drop_threshold,
    dropout,
    effective_p,
    keep_factor,
    keep_mask,
    keep_scale,
    random_words,
    uses_cheap_masks,
)
from tests.conftest import assert_within_rounding

CPU = torch.device("cpu")


@pytest.mark.parametrize("p", [0.1, 0.25, 0.5, 0.9, 1e-4])
def test_the_realised_rate_is_within_2_to_the_minus_17_of_p_and_the_masks_draw_it(p):
    assert abs(effective_p(p) - p) <= 2.0**-17
    n = 1 << 20
    kept = keep_mask(torch.Size([n]), p, CPU)
    assert kept.dtype == torch.bool and kept.shape == (n,)
    dropped = n - int(kept.sum())
    q = effective_p(p)
    assert abs(dropped - n * q) <= 6 * math.sqrt(n * q * (1 - q)) + 1  # six binomial standard deviations


def test_masks_are_a_function_of_the_rng_state_and_resume_from_it():
    torch.manual_seed(7)
    first = keep_mask(torch.Size([3, 1001]), 0.1, CPU)
    state = torch.get_rng_state()
    second = keep_mask(torch.Size([3, 1001]), 0.1, CPU)
    torch.manual_seed(7)
    assert torch.equal(keep_mask(torch.Size([3, 1001]), 0.1, CPU), first)
    torch.set_rng_state(state)  # as a resumed run restores it from its checkpoint
    assert torch.equal(keep_mask(torch.Size([3, 1001]), 0.1, CPU), second)
    assert not torch.equal(first, second)


@pytest.mark.parametrize("p", [0.1, 0.5, 1e-3, 0.99])
def test_a_mask_keeps_exactly_the_words_at_or_above_the_cut(p):
    """The clamp that makes the mask is the comparison ``word >= round(p * 2**16) - 2**15`` of the same words."""
    torch.manual_seed(5)
    words = random_words(5000)
    torch.manual_seed(5)
    kept = keep_mask(torch.Size([50, 100]), p, CPU)
    assert torch.equal(kept, (words >= drop_threshold(p) - 2**15).view(50, 100))
    assert 0 < int(kept.sum()) < 5000


@pytest.mark.parametrize(("p", "kept"), [(2.0**-18, True), (1 - 2.0**-18, False)])
def test_a_rate_that_rounds_to_none_or_all_draws_nothing(p, kept):
    torch.manual_seed(0)
    state = torch.get_rng_state()
    assert (keep_mask(torch.Size([4, 5]), p, CPU) == kept).all()
    assert torch.equal(torch.get_rng_state(), state)


def test_the_words_are_uniform_16_bit_values():
    torch.manual_seed(1)
    words = random_words(1 << 20).long() + 2**15  # 0 .. 2**16 - 1
    assert words.min() >= 0 and words.max() < 2**16
    counts = torch.bincount(words >> 10, minlength=64).double()  # 64 bins of 1,024 words
    expected = (1 << 20) / 64
    assert float(((counts - expected) ** 2 / expected).sum()) < 63 + 6 * math.sqrt(2 * 63)  # chi-square, 63 dof


def test_neighbouring_elements_are_uncorrelated():
    """Four elements share one 64-bit draw: their words must still be independent (no pattern by position)."""
    torch.manual_seed(0)
    kept = keep_mask(torch.Size([1 << 18, 4]), 0.5, CPU).double()
    corr = torch.corrcoef(kept.t())
    off_diagonal = corr[~torch.eye(4, dtype=torch.bool)]
    assert off_diagonal.abs().max() < 6 / math.sqrt(1 << 18)  # six standard errors of a zero correlation


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_factor_holds_exactly_the_scale_in_the_tensors_dtype(dtype):
    kept = torch.tensor([True, False, True])
    factor = keep_factor(kept, keep_scale(0.1), dtype)
    assert factor.dtype == dtype
    assert factor.tolist() == [torch.tensor(keep_scale(0.1), dtype=dtype).item(), 0.0,
                               torch.tensor(keep_scale(0.1), dtype=dtype).item()]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_applying_and_adding_a_mask_match_the_plain_composition(dtype):
    torch.manual_seed(0)
    x, y = torch.randn(2, 300, 17, dtype=dtype).unbind(0)
    p = 0.3
    kept = keep_mask(x.shape, p, CPU)
    scale = keep_scale(p)
    exact = torch.where(kept, y.double() * scale, 0.0)
    out = apply_mask(y, kept, scale)
    assert out.dtype == dtype
    assert_within_rounding(exact, out, exact.abs(), roundings=2, dtype=dtype, what="apply_mask")  # scale cast, product
    assert (out[~kept] == 0).all()
    summed = add_masked(x, y, kept, scale)
    assert_within_rounding(x.double() + exact, summed, x.double().abs() + exact.abs(), roundings=3, dtype=dtype,
                           what="add_masked")


def test_dropout_gradient_is_the_same_mask_and_scale():
    x = torch.randn(40, 30, dtype=torch.float64, requires_grad=True)

    def f(x):
        with torch.random.fork_rng():
            torch.manual_seed(3)  # the same mask on every call
            return dropout(x, 0.4)

    assert torch.autograd.gradcheck(f, (x,))
    with torch.random.fork_rng():
        torch.manual_seed(3)
        kept = keep_mask(x.shape, 0.4, CPU)
    grad = torch.randn_like(x)
    (got,) = torch.autograd.grad(f(x), x, grad)
    expected = torch.where(kept, grad * keep_scale(0.4), 0.0)
    assert_within_rounding(expected, got, expected.abs(), roundings=1, dtype=torch.float64)


def test_eval_zero_and_one_and_other_devices_take_the_plain_paths():
    x = torch.randn(5, 7)
    assert dropout(x, 0.5, training=False) is x and dropout(x, 0.0) is x
    assert (Dropout(1.0).train()(x) == 0).all()  # not a 16-bit mask: F.dropout's
    assert not uses_cheap_masks(x, 1.0) and not uses_cheap_masks(torch.empty(3, device="meta"), 0.1)
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        Dropout(1.5)


def test_a_bfloat16_tensor_keeps_its_dtype_and_an_unbiased_scale():
    """bfloat16 rounds 1 / 0.9 to 1.109: the factor stays float32, so only the product is rounded."""
    torch.manual_seed(0)
    x = torch.randn(1 << 16).to(torch.bfloat16)
    kept = keep_mask(x.shape, 0.1, CPU)
    out = apply_mask(x, kept, keep_scale(0.1))
    assert out.dtype == torch.bfloat16
    exact = torch.where(kept, x.double() * keep_scale(0.1), 0.0)
    assert_within_rounding(exact, out, exact.abs(), roundings=2, dtype=torch.bfloat16)
    realised = (out.double() / x.double())[kept & (x != 0)].mean()
    assert abs(realised - keep_scale(0.1)) < 3e-4  # bfloat16's own 1.109 would be 1.7e-3 off
