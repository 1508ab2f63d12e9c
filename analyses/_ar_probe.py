"""What one AR model does on one batch: feature scales, attention weights, residual share, gradient norms.

Used by ``analyses.ar_scales`` at initialisation and during a short training. Every quantity is measured on the
model's own q, k (captured at each layer's attention) and on the exact weights the mechanism computes:

- ``q``, ``k``: mean L2 norm of a head's query / key; ``phi_q``, ``phi_k``: of its features (float64, unscaled:
  a product of p linear forms, squared, grows like ``|q|^(2p)``; BASED's Taylor map like ``|q W|^2``);
- ``den``: ``log10`` of the mean kernel value ``den_i / (i + 1)`` of query ``i`` (median over queries) and
  ``den_spread``, its standard deviation over queries (orders of magnitude between queries);
- ``eps_share``: ``eps / (den + eps)`` as the module computes it (LLoPS rescales q, k and eps by powers of two);
- ``eff_keys``: ``((sum_j |w_ij|)^2 / sum_j w_ij^2) / (i + 1)``: 1 for uniform weights, ``1 / (i + 1)`` for one
  key, whatever the weights sum to (where eps dominates a denominator they sum to less than 1; with signed
  weights, unsquared LLoPS, it counts by |w|);
- ``top1``: the largest weight; ``neg_mass``: weight on negative kernel values (unsquared LLoPS);
- ``feat_eff``: the features a query's denominator effectively sums over (participation ratio of each
  feature's share ``phi_q[i, f] sum_j phi_k[j, f] / den_i``) as a fraction of m: 1 when every feature carries
  the same mass, ``1 / m`` when one carries it all; ``feat_used``: the same of the shares summed over every
  query (low ``feat_eff`` with high ``feat_used``: each query picks its few features; both low: a few features
  serve every query and the attention has rank about ``feat_used m``);
- ``prev``: the weight a position puts on the one before it (a previous-token head: the first half of the
  two-layer MQAR circuit), over positions 1..N-1; ``self``: the weight on itself;
- ``match_key``, ``match_value``: at query positions, the weight on the position of the queried key and of its
  value (the second half of the circuit; uniform weights give ``uniform``, the mean ``1 / (i + 1)``), and
  ``value_pick``: the weight on the queried value over the mean weight on all P values of the sequence (1: no
  preference among the values, P: all of their weight on the right one);
- ``attn_ratio``: ``|attention branch| / |residual input|`` per token of the block.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from attention_zoo.based import BasedAttention
from attention_zoo.llops import LLoPSAttention
from lra.feedforward import FeedForward
from lra.model import AttentionBlock
from lra.tasks.ar import IGNORE

from ._microscope_capture import LayerCapture, capture


def features(module: nn.Module, q: Tensor, k: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """Unscaled float64 features ``phi_q_raw``, ``phi_k_raw`` and those the module normalises with (``phi_q``,
    ``phi_k``, ``eps``: LLoPS without constant or linear term rescales q, k by powers of two first)."""
    q, k = q.double(), k.double()
    if isinstance(module, BasedAttention):
        phi_q, phi_k = module.features(q, module.w_q), module.features(k, module.w_k)
        return {"phi_q_raw": phi_q, "phi_k_raw": phi_k, "phi_q": phi_q, "phi_k": phi_k, "eps": module.eps}
    if not isinstance(module, LLoPSAttention):
        raise TypeError(f"ar_scales measures based and llops, not {type(module).__name__}")
    raw = {"phi_q_raw": module.features_of(q, "q"), "phi_k_raw": module.features_of(k, "k")}
    if not module.homogeneous():
        return {**raw, "phi_q": raw["phi_q_raw"], "phi_k": raw["phi_k_raw"], "eps": module.eps}
    q_s, k_s, eps = module.rescaled(q, k, mask)
    return {**raw, "phi_q": module.features_of(q_s, "q"), "phi_k": module.features_of(k_s, "k"), "eps": eps}


def match_positions(tokens: Tensor, targets: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Batch index, query position, the queried key's position and its value's, one entry per query."""
    b, i = (targets != IGNORE).nonzero(as_tuple=True)
    same = tokens[b] == tokens[b, i][:, None]  # (Q, N): the key itself, first at its pair's position
    same[torch.arange(len(i)), i] = False
    key_pos = same.float().argmax(-1)
    return b, i, key_pos, key_pos + 1


def causal_weights(parts: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    """The weights ``(B, H, N, N)`` of causal normalised attention on ``features``' output, float64, with the
    denominators ``den`` and the ``eps`` added to them ``(B, H, N)``."""
    n = parts["phi_q"].shape[-2]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    kernel = (parts["phi_q"] @ parts["phi_k"].transpose(-1, -2)).masked_fill(~causal, 0)  # (B, H, N, N)
    den = kernel.sum(-1)  # (B, H, N)
    eps = parts["eps"] if torch.is_tensor(parts["eps"]) else torch.tensor(parts["eps"], dtype=torch.float64)
    eps = eps.double().expand_as(den[..., None])[..., 0]
    return kernel / (den + eps)[..., None], den, eps


def layer_metrics(layer: LayerCapture, tokens: Tensor, targets: Tensor) -> dict[str, float]:
    """The kernel and weight metrics of one captured layer (module docstring), averaged over batch and heads."""
    parts = features(layer.module, layer.q, layer.k, layer.mask)
    weights, den, eps = causal_weights(parts)
    count = torch.arange(1, weights.shape[-1] + 1, dtype=torch.float64)
    mean_kernel = (den / count).abs().clamp_min(1e-300).log10()
    b, i, key_pos, value_pos = match_positions(tokens, targets)
    at_query = weights[b, :, i]  # (Q, H, N)
    values = torch.arange(1, 2 * int((targets[0] != IGNORE).sum()), 2)  # the P value positions
    rows = torch.arange(len(i))
    share = (parts["phi_q"] * parts["phi_k"].cumsum(-2)).abs()  # (B, H, N, m): feature f's part of den_i
    share = share / share.sum(-1, keepdim=True).clamp_min(1e-300)
    diagonal = weights.diagonal(dim1=-2, dim2=-1)  # (B, H, N)
    return {
        "q": layer.q.double().norm(dim=-1).mean().item(), "k": layer.k.double().norm(dim=-1).mean().item(),
        "phi_q": parts["phi_q_raw"].norm(dim=-1).mean().item(), "phi_k": parts["phi_k_raw"].norm(dim=-1).mean().item(),
        "den": mean_kernel.median().item(), "den_spread": mean_kernel.std().item(),
        "eps_share": (eps / (den + eps)).mean().item(),
        "eff_keys": (weights.abs().sum(-1).pow(2) / weights.pow(2).sum(-1).clamp_min(1e-300) / count).mean().item(),
        "top1": weights.amax(-1).mean().item(),
        "neg_mass": (weights.clamp_max(0).abs().sum(-1) / weights.abs().sum(-1)).mean().item(),
        "feat_eff": (1 / share.pow(2).sum(-1) / share.shape[-1]).mean().item(),
        "feat_used": participation(share.sum((0, 1, 2))) / share.shape[-1],
        "prev": weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean().item(), "self": diagonal.mean().item(),
        "match_key": at_query[rows, :, key_pos].mean().item(),
        "match_value": at_query[rows, :, value_pos].mean().item(),
        "uniform": (1 / (i + 1).double()).mean().item(),
        "value_pick": (at_query[rows, :, value_pos] / at_query[:, :, values].mean(-1)).mean().item(),
    }


def participation(mass: Tensor) -> float:
    """``(sum mass)^2 / sum mass^2`` of non-negative ``mass``: how many entries effectively carry it."""
    return (mass.sum().pow(2) / mass.pow(2).sum().clamp_min(1e-300)).item()


@torch.no_grad()
def residual_ratios(model: nn.Module, batch: dict[str, Tensor]) -> list[float]:
    """Per attention block, ``mean |block(x) - x| / mean |x|`` over tokens (eval mode: no dropout)."""
    blocks = [m for m in model.modules() if isinstance(m, AttentionBlock)]
    ratios: dict[int, float] = {}

    def keeper(index: int):
        def hook(module, args, output):
            x = args[0]
            ratios[index] = ((output - x).norm(dim=-1).mean() / x.norm(dim=-1).mean()).item()
        return hook

    handles = [block.register_forward_hook(keeper(j)) for j, block in enumerate(blocks)]
    try:
        model(batch)
    finally:
        for handle in handles:
            handle.remove()
    return [ratios[j] for j in range(len(blocks))]


def parameter_groups(model: nn.Module) -> dict[str, list[tuple[nn.Parameter, slice | None]]]:
    """Named groups of (parameter, row slice): per layer ``sketch<l>`` (the attention's own parameters) and
    ``qk<l>`` (the q and k rows of the input projection); then ``embeddings``, ``v_out`` (v rows and the output
    projection of every block), ``ffn`` and ``rest`` (norms and the read-out)."""
    groups: dict[str, list] = {"embeddings": [], "v_out": [], "ffn": [], "rest": []}
    seen: set[int] = set()
    blocks = [m for m in model.modules() if isinstance(m, AttentionBlock)]
    for j, block in enumerate(blocks):
        inner = block.inner
        groups[f"sketch{j}"] = [(p, None) for p in block.attention.parameters()]
        groups[f"qk{j}"] = [(block.qkv.weight, slice(0, 2 * inner)), (block.qkv.bias, slice(0, 2 * inner))]
        groups["v_out"] += [(block.qkv.weight, slice(2 * inner, None)), (block.qkv.bias, slice(2 * inner, None)),
                            (block.out.weight, None), (block.out.bias, None)]
        seen |= {id(p) for p in block.attention.parameters()} | {id(p) for p in (block.qkv.weight, block.qkv.bias,
                                                                                  block.out.weight, block.out.bias)}
    for module in model.modules():
        group = ("embeddings" if isinstance(module, nn.Embedding) else "ffn" if isinstance(module, FeedForward)
                 else None)
        if group:
            groups[group] += [(p, None) for p in module.parameters() if id(p) not in seen]
            seen |= {id(p) for p in module.parameters()}
    groups["rest"] = [(p, None) for p in model.parameters() if id(p) not in seen]
    return groups


def group_norms(groups: dict[str, list[tuple[nn.Parameter, slice | None]]]) -> dict[str, float]:
    """``grad_<group>`` (L2 norm of the gradient) and ``rel_<group>`` (that over the parameters' norm)."""
    out = {}
    for name, members in groups.items():
        grads = [p.grad[s] if s is not None else p.grad for p, s in members if p.grad is not None]
        params = [p.detach()[s] if s is not None else p.detach() for p, s in members]
        g = torch.sqrt(sum(t.double().pow(2).sum() for t in grads)) if grads else torch.tensor(0.0)
        w = torch.sqrt(sum(t.double().pow(2).sum() for t in params)) if params else torch.tensor(0.0)
        out[f"grad_{name}"], out[f"rel_{name}"] = g.item(), (g / w).item() if w > 0 else float("nan")
    return out


def adam_steps(optimizer: torch.optim.Optimizer, groups: dict[str, list[tuple[nn.Parameter, slice | None]]]) -> dict:
    """``adam_<group>``: mean ``|m_hat / (sqrt(v_hat) + eps)|`` over the group's entries, the size of AdamW's next
    step in units of the learning rate (about 1 for a steady gradient; far below 1 when a few large gradients
    inflate ``v``); nothing before the first step."""
    out = {}
    for name, members in groups.items():
        sizes = []
        for p, s in members:
            state = optimizer.state.get(p)
            if not state:
                continue
            group = next(g for g in optimizer.param_groups if any(q is p for q in g["params"]))
            (beta1, beta2), step = group["betas"], float(state["step"])
            m_hat = state["exp_avg"] / (1 - beta1**step)
            v_hat = state["exp_avg_sq"] / (1 - beta2**step)
            size = (m_hat / (v_hat.sqrt() + group["eps"])).abs()
            sizes.append(size[s] if s is not None else size)
        if sizes:
            out[f"adam_{name}"] = (sum(t.sum() for t in sizes) / sum(t.numel() for t in sizes)).item()
    return out


def probe(model: nn.Module, batch: dict[str, Tensor]) -> tuple[list[dict[str, float]], dict[str, Any]]:
    """Per-layer metrics and model-level ones (loss, query accuracy, gradient norms) on ``batch``, in eval mode
    (no dropout); the model's gradients are cleared before and after, its mode restored."""
    was_training = model.training
    model.eval()
    try:
        layers = [layer_metrics(c, batch["tokens"], batch["targets"]) for c in capture(model, batch)]
        for row, ratio in zip(layers, residual_ratios(model, batch)):
            row["attn_ratio"] = ratio
        model.zero_grad(set_to_none=True)
        loss, logits, targets = model.model_step(batch)
        loss.backward()
        keep = targets != IGNORE
        overall = {"loss": loss.item(), "acc": (logits.argmax(-1)[keep] == targets[keep]).double().mean().item(),
                   **group_norms(parameter_groups(model))}
        model.zero_grad(set_to_none=True)
    finally:
        model.train(was_training)
    return layers, overall
