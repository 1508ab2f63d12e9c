"""The report card's correctness checks: what the attention contract (docs/design.md section 3) promises, measured.

Each check compares two computations that must agree and reports a plain ``pass``/``fail`` (or ``skipped`` with
the reason) with the number it measured: the relative RMSE ``rms(ref - out) / rms(ref)`` (fla's test measure) for
values, or a count of non-finite values. A check that raises is that check's failure, with the error, never the
card's. The mechanism is built as the run's model builds it (``lra.module.attention_factory``: its yaml options
and command-line ``attention.*`` overrides, ``head_dim = model.dim / model.heads``), in eval mode, its weights
drawn after ``torch.manual_seed(SEED)``:

- ``oracle``: ``forward`` against ``module.naive`` (the explicit n x n weights): real outputs; gradients of q, k,
  v, the extra inputs and the module's parameters under a random upstream gradient on real outputs.
- ``one real token``: a sequence holding one real token beside a half-padded one: finite, equal to the oracle.
- ``padding invariance``: appended pads (garbage values) change no real output and no real input's gradient.
- ``batch independence``: each sequence of a padded batch of three lengths equals that sequence alone.
- ``causal``: with ``supports_causal``, ``causal=True`` equals the causally masked oracle, and tokens after a cut
  change neither the outputs before it nor (through them) the gradients of earlier inputs, which must ignore the
  future's; without it, ``causal=True`` must be refused by name.
- ``long``: outputs and gradients finite at ``long`` tokens (16,384 by default, the last 1,000 padded), inputs of
  scale 1 and 3 (the contract's), in fp32; under bf16 autocast on the CPU and fp16/bf16 on CUDA, finite and within
  20 roundings (``20 eps / 2``) of fp32 on the same bf16-rounded inputs, outputs and gradients.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

import attention_zoo
from lra.module import attention_factory
from lra.settings import Run

SEED = 0
SHORT = 300  # tokens of the oracle checks: past one 256-token chunk, not a multiple of 64-token blocks
PADS = 77
LENGTHS = (300, 211, 57)  # batch independence
CUT = 173  # causal: tokens after it are changed
OUTPUT_BOUND, GRADIENT_BOUND = 1e-4, 1e-3  # the contract tests' ratios (tests/attention_zoo/test_contract.py)
LEAK_BOUND = 1e-5
LOW_PRECISION_ROUNDINGS = 20


@dataclass(frozen=True)
class Outcome:
    """One check's verdict (``pass``, ``fail`` or ``skipped``), measured value, what it measures and the detail."""

    verdict: str
    value: float | None
    measure: str
    detail: str


@dataclass(frozen=True)
class Subject:
    """The mechanism under test: ``make(causal, max_len)`` builds it; ``heads`` and ``head_dim`` its shapes."""

    make: Callable[..., nn.Module]
    heads: int
    head_dim: int
    supports_causal: bool


def subject(run: Run) -> Subject:
    """The run's attention, built as its model builds it (``lra.module.attention_factory``, layer 0)."""
    model = run.model

    def make(causal: bool = False, max_len: int = SHORT) -> nn.Module:
        torch.manual_seed(SEED)
        return attention_factory(replace(run, task=replace(run.task, causal=causal, max_len=max_len)))(0).eval()

    return Subject(make, model.heads, (model.qkv_dim or model.dim) // model.heads,
                   bool(getattr(attention_zoo.get(run.attention.name), "supports_causal", False)))


def relative_rmse(ref: Tensor, out: Tensor) -> float:
    """``rms(ref - out) / rms(ref)`` in float64; inf when ``out`` is not finite, 0 when the two are equal."""
    ref, out = ref.detach().double(), out.detach().double()
    if not torch.isfinite(out).all():
        return math.inf
    err = float((ref - out).pow(2).mean().sqrt())
    if err == 0.0:
        return 0.0
    scale = float(ref.pow(2).mean().sqrt())
    return err / scale if scale > 0 else math.inf


def randn(shape, seed: int, scale: float = 1.0) -> Tensor:
    """Standard normal values of ``shape`` from their own generator (``seed`` past ``SEED``)."""
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(SEED + seed))


def qkv(s: Subject, module: nn.Module, batch: int, n: int, scale: float = 1.0) -> dict[str, Tensor]:
    """Random ``q, k, v`` ``(B, H, N, D)`` of ``scale`` and the mechanism's declared extra inputs (a gate)."""
    shape = (batch, s.heads, n, s.head_dim)
    names = ("q", "k", "v", *attention_zoo.extra_inputs(module))
    return {name: randn(shape, 10 * i + n + batch, scale) for i, name in enumerate(names)}


def run(fn, module: nn.Module, tensors: dict[str, Tensor], mask: Tensor, upstream: Tensor | None,
        autocast: torch.dtype | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """``fn(q, k, v, key_padding_mask=mask, **extras)`` and, given ``upstream``, the gradients of
    ``sum(out * upstream)`` over real queries for every input and parameter (by name)."""
    leaves = {name: t.detach().clone().requires_grad_(upstream is not None) for name, t in tensors.items()}
    module.zero_grad(set_to_none=True)
    q, k, v = leaves.pop("q"), leaves.pop("k"), leaves.pop("v")
    device = q.device.type
    with torch.autocast(device, dtype=autocast or torch.bfloat16, enabled=autocast is not None):
        out = fn(q, k, v, key_padding_mask=mask, **leaves)
    grads: dict[str, Tensor] = {}
    if upstream is not None:
        (out.float() * upstream * mask[:, None, :, None]).sum().backward()
        grads = {"q": q.grad, "k": k.grad, "v": v.grad, **{name: t.grad for name, t in leaves.items()}}
        grads.update({f"param {name}": torch.zeros_like(p) if p.grad is None else p.grad.clone()
                      for name, p in module.named_parameters()})
    return out.detach(), grads


def real(t: Tensor, mask: Tensor) -> Tensor:
    """The ``(B, H, N, ...)`` entries at real tokens."""
    return t[mask[:, None, :].expand(t.shape[0], t.shape[1], -1)]


def worst(pairs: dict[str, tuple[Tensor, Tensor]]) -> tuple[str, float]:
    """The name and relative RMSE of the pair ``(ref, out)`` that differs most."""
    errors = {name: relative_rmse(ref, out) for name, (ref, out) in pairs.items()}
    name = max(errors, key=errors.get)
    return name, errors[name]


def verdict(ok: bool) -> str:
    return "pass" if ok else "fail"


def half_padded(batch: int, n: int) -> Tensor:
    """Key mask: every row real but the last, whose final third is padding."""
    mask = torch.ones(batch, n, dtype=torch.bool)
    mask[-1, n - n // 3:] = False
    return mask


def oracle_pair(s: Subject, module: nn.Module, mask: Tensor) -> tuple[float, str, float]:
    """Forward against the oracle: output error, and the worst gradient's name and error."""
    tensors = qkv(s, module, *mask.shape)
    upstream = randn(tensors["v"].shape, 2)
    ref, ref_grads = run(module.naive, module, tensors, mask, upstream)
    out, grads = run(module, module, tensors, mask, upstream)
    name, gradient_error = worst({name: (ref_grads[name], grads[name]) for name in ref_grads})
    return relative_rmse(real(ref, mask), real(out, mask)), name, gradient_error


def oracle_outputs(s: Subject) -> Outcome:
    error, _, _ = oracle_pair(s, s.make(), half_padded(2, SHORT))
    return Outcome(verdict(error <= OUTPUT_BOUND), error, "relative RMSE",
                   f"forward vs naive oracle, real outputs, n = {SHORT}, a row a third padded; bound {OUTPUT_BOUND:g}")


def oracle_gradients(s: Subject) -> Outcome:
    _, name, error = oracle_pair(s, s.make(), half_padded(2, SHORT))
    return Outcome(verdict(error <= GRADIENT_BOUND), error, "relative RMSE",
                   f"worst gradient ({name}) of forward vs naive oracle, n = {SHORT}; bound {GRADIENT_BOUND:g}")


def one_real_token(s: Subject) -> Outcome:
    mask = torch.zeros(2, SHORT, dtype=torch.bool)
    mask[0, 0] = True
    mask[1, : SHORT // 2] = True
    error, name, gradient_error = oracle_pair(s, s.make(), mask)
    ok = error <= OUTPUT_BOUND and math.isfinite(gradient_error)
    return Outcome(verdict(ok), error, "output relative RMSE",
                   f"a row of one real token beside a half-padded one, vs the oracle (bound {OUTPUT_BOUND:g}); "
                   f"gradients {'finite' if math.isfinite(gradient_error) else f'not finite ({name})'}")


def padding_invariance(s: Subject) -> Outcome:
    module = s.make(max_len=SHORT + PADS)
    tensors = qkv(s, module, 2, SHORT)
    upstream = randn(tensors["v"].shape, 3)
    mask = torch.ones(2, SHORT, dtype=torch.bool)
    ref, ref_grads = run(module, module, tensors, mask, upstream)
    padded = {name: torch.cat([t, randn((*t.shape[:2], PADS, t.shape[3]), 4 + i, 5.0)], dim=2)
              for i, (name, t) in enumerate(tensors.items())}
    padded_mask = torch.cat([mask, torch.zeros(2, PADS, dtype=torch.bool)], dim=1)
    more_upstream = torch.cat([upstream, torch.zeros(*upstream.shape[:2], PADS, upstream.shape[3])], dim=2)
    out, grads = run(module, module, padded, padded_mask, more_upstream)
    error = relative_rmse(ref, out[:, :, :SHORT])
    name, gradient_error = worst({n: (ref_grads[n], grads[n][:, :, :SHORT]) for n in tensors})
    ok = error <= OUTPUT_BOUND and gradient_error <= GRADIENT_BOUND
    return Outcome(verdict(ok), error, "output relative RMSE",
                   f"real outputs with {PADS} garbage pads appended vs none, n = {SHORT} (bound {OUTPUT_BOUND:g}); "
                   f"worst real gradient ({name}) {gradient_error:.2e} (bound {GRADIENT_BOUND:g})")


def batch_independence(s: Subject) -> Outcome:
    module = s.make(max_len=max(LENGTHS))
    n = max(LENGTHS)
    tensors = qkv(s, module, len(LENGTHS), n)
    mask = torch.arange(n)[None, :] < torch.tensor(LENGTHS)[:, None]
    together, _ = run(module, module, tensors, mask, None)
    errors = []
    for i, length in enumerate(LENGTHS):
        alone, _ = run(module, module, {name: t[i:i + 1, :, :length] for name, t in tensors.items()},
                       torch.ones(1, length, dtype=torch.bool), None)
        errors.append(relative_rmse(alone, together[i:i + 1, :, :length]))
    error = max(errors)
    return Outcome(verdict(error <= OUTPUT_BOUND), error, "relative RMSE",
                   f"each of a padded batch of lengths {', '.join(map(str, LENGTHS))} against it alone "
                   f"(worst sequence); bound {OUTPUT_BOUND:g}")


def causal_refused(s: Subject) -> Outcome | None:
    """For a mechanism that does not claim ``causal``: pass when ``causal=True`` is refused by name."""
    if s.supports_causal:
        return None
    try:
        s.make(causal=True)
    except Exception as err:  # noqa: BLE001 - any refusal counts if it names causal
        named = "causal" in str(err)
        return Outcome(verdict(named), None, "", "does not claim causal; causal=True is refused"
                       + ("" if named else f" without saying why: {type(err).__name__}: {err}"))
    return Outcome("fail", None, "", "supports_causal is False, yet causal=True was accepted (the contract says "
                                     "refuse it with a ValueError naming causal)")


def causal_oracle(s: Subject) -> Outcome:
    if (refused := causal_refused(s)) is not None:
        return refused
    error, name, gradient_error = oracle_pair(s, s.make(causal=True), half_padded(2, SHORT))
    ok = error <= OUTPUT_BOUND and gradient_error <= GRADIENT_BOUND
    return Outcome(verdict(ok), error, "output relative RMSE",
                   f"causal=True vs the causally masked oracle, n = {SHORT} (bound {OUTPUT_BOUND:g}); worst "
                   f"gradient ({name}) {gradient_error:.2e} (bound {GRADIENT_BOUND:g})")


def causal_leakage(s: Subject) -> Outcome:
    if (refused := causal_refused(s)) is not None:
        return refused
    module = s.make(causal=True)
    tensors = qkv(s, module, 2, SHORT)
    mask = half_padded(2, SHORT)
    upstream = randn(tensors["v"].shape, 5)
    upstream[:, :, CUT + 1:] = 0  # only outputs up to the cut are differentiated
    changed = {name: torch.cat([t[:, :, :CUT + 1], randn((*t.shape[:2], SHORT - CUT - 1, t.shape[3]), 6 + i, 3.0)],
                               dim=2) for i, (name, t) in enumerate(tensors.items())}
    before, grads = run(module, module, tensors, mask, upstream)
    after, _ = run(module, module, changed, mask, upstream)
    past = mask.clone()
    past[:, CUT + 1:] = False
    error = relative_rmse(real(before, past), real(after, past))
    leak = max(float(grads[name][:, :, CUT + 1:].abs().max()) for name in tensors)
    scale = max(float(grads[name][:, :, :CUT + 1].abs().max()) for name in tensors)
    gradient_leak = leak / scale if scale > 0 else (0.0 if leak == 0 else math.inf)
    ok = error <= LEAK_BOUND and gradient_leak <= LEAK_BOUND
    return Outcome(verdict(ok), error, "output relative RMSE",
                   f"outputs at tokens <= {CUT} when every later token is replaced (bound {LEAK_BOUND:g}); largest "
                   f"gradient of a later input from those outputs {gradient_leak:.2e} of the earlier ones' "
                   f"(bound {LEAK_BOUND:g})")


def long_pads(n: int) -> int:
    """Padded tokens at the end of the long checks' sequence: 1,000 (a quarter of a short one)."""
    return min(1000, n // 4)


def long_inputs(s: Subject, module: nn.Module, n: int, scale: float, device: str):
    """bf16-representable ``q, k, v`` (and extras) at length ``n``, its last ``long_pads(n)`` padded, an upstream."""
    tensors = {name: t.bfloat16().float().to(device) for name, t in qkv(s, module, 1, n, scale).items()}
    mask = torch.ones(1, n, dtype=torch.bool, device=device)
    mask[0, n - long_pads(n):] = False
    return tensors, mask, randn(tensors["v"].shape, 7).to(device)


def non_finite(out: Tensor, grads: dict[str, Tensor], mask: Tensor) -> int:
    """Non-finite values among the real outputs and every gradient."""
    count = int((~torch.isfinite(real(out.float(), mask))).sum())
    return count + sum(int((~torch.isfinite(g.float())).sum()) for g in grads.values() if g is not None)


def long_fp32(s: Subject, n: int) -> Outcome:
    module = s.make(max_len=n)
    bad = 0
    for scale in (1.0, 3.0):
        tensors, mask, upstream = long_inputs(s, module, n, scale, "cpu")
        out, grads = run(module, module, tensors, mask, upstream)
        bad += non_finite(out, grads, mask)
    return Outcome(verdict(bad == 0), float(bad), "non-finite values",
                   f"fp32 outputs and gradients at n = {n:,} (last {long_pads(n):,} padded), inputs of scale 1 and 3")


def low_precision(s: Subject, n: int, device: str, dtype: torch.dtype) -> Outcome:
    """Autocast to ``dtype`` on ``device`` against fp32 on the same (bf16-rounded) inputs: finite, and errors."""
    if device == "cuda" and not torch.cuda.is_available():
        return Outcome("skipped", None, "", "skipped: no CUDA device")
    module = s.make(max_len=n).to(device)
    bound = LOW_PRECISION_ROUNDINGS * torch.finfo(dtype).eps / 2
    bad, error, (name, gradient_error) = 0, 0.0, ("q", 0.0)
    for scale in (1.0, 3.0):
        tensors, mask, upstream = long_inputs(s, module, n, scale, device)
        ref, ref_grads = run(module, module, tensors, mask, upstream)
        out, grads = run(module, module, {key: t.to(dtype) for key, t in tensors.items()}, mask, upstream, dtype)
        bad += non_finite(out, grads, mask)
        error = max(error, relative_rmse(real(ref, mask), real(out, mask)))
        this = worst({key: (ref_grads[key], grads[key]) for key in tensors})
        name, gradient_error = max((name, gradient_error), this, key=lambda pair: pair[1])
    ok = bad == 0 and error <= bound and gradient_error <= bound
    label = str(dtype).removeprefix("torch.")
    return Outcome(verdict(ok), error, "output relative RMSE vs fp32",
                   f"{label} autocast on {device} at n = {n:,}, inputs of scale 1 and 3: {bad} non-finite values; "
                   f"worst gradient ({name}) {gradient_error:.2e}; bound {bound:.2g} ({LOW_PRECISION_ROUNDINGS} "
                   f"roundings of {label})")


def checks(long: int) -> list[tuple[str, Callable[[Subject], Outcome], int]]:
    """``(check, function, length)`` in the card's order."""
    return [
        ("oracle: outputs", oracle_outputs, SHORT),
        ("oracle: gradients", oracle_gradients, SHORT),
        ("one real token", one_real_token, SHORT),
        ("padding invariance", padding_invariance, SHORT),
        ("batch independence", batch_independence, max(LENGTHS)),
        ("causal: oracle", causal_oracle, SHORT),
        ("causal: no leakage", causal_leakage, SHORT),
        ("long: fp32 finite", lambda s: long_fp32(s, long), long),
        ("long: bf16 autocast (CPU)", lambda s: low_precision(s, long, "cpu", torch.bfloat16), long),
        ("long: fp16 autocast (CUDA)", lambda s: low_precision(s, long, "cuda", torch.float16), long),
        ("long: bf16 autocast (CUDA)", lambda s: low_precision(s, long, "cuda", torch.bfloat16), long),
    ]


def attempt(check: Callable[[Subject], Outcome], s: Subject) -> Outcome:
    """``check(s)``; an exception becomes the check's failure, naming it (the card goes on)."""
    try:
        return check(s)
    except Exception as err:  # noqa: BLE001 - a crash is this check's result, not the card's
        message = " ".join(str(err).split())[:300]
        return Outcome("fail", None, "", f"raised {type(err).__name__}: {message}")


def correctness_rows(run: Run, shown: str, long: int = 16384, log=print) -> list[dict[str, Any]]:
    """One row per check of the run's attention (``shown``: its name in the rows): section, check, attention, n,
    verdict, value (None when not finite: the detail says so), measure, detail."""
    s = subject(run)
    rows = []
    for name, check, n in checks(long):
        outcome = attempt(check, s)
        value, detail = outcome.value, outcome.detail
        if value is not None and not math.isfinite(value):
            value, detail = None, f"not finite; {detail}"
        rows.append({"section": "correctness", "check": name, "attention": shown, "n": n, "verdict": outcome.verdict,
                     "value": value, "measure": outcome.measure, "detail": detail})
        log(f"report_card: {name}: {outcome.verdict}" + ("" if value is None else f" {value:.3g}"))
    return rows
