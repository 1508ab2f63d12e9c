"""Parity with the papers' formulas where no pip package exists: each oracle below is written out in float64
from the paper, in the layout of the official code named in its docstring (read there, not copied), and
compared with our module on unpadded input (outputs and gradients, float32 precision).

Official files (commits as inspected):
- FLatten: LeapLabTHU/FLatten-Transformer@abdb115 models/flatten_swin.py ``FocusedLinearAttention.forward``
- PolaFormer: ZacharyMeng/PolaFormer@44cdd39 models/pola_swin.py ``PolaLinearAttention.forward``
- cosFormer: OpenNLPLab/cosFormer cosformer.py ``CosformerAttention`` (non-causal, ReLU)
- Skyformer: pkuzengqi/Skyformer@cfe8c8c src/models/attention_skyformer.py ``Skyformer.forward``
- linear: idiap/fast-transformers fast_transformers/attention/linear_attention.py (no CPU wheel installs)
- BASED: HazyResearch/based@32c1bd4 based/models/mixers/linear_attention.py ``TaylorExp.forward``,
  ``LinearAttention.parallel_forward`` (``parallel_implementation="quadratic"``, causal)
- Hedgehog: HazyResearch/lolcats@375df84 src/model/feature_map.py ``FeatureMapMLP.forward`` + ``SoftmaxDim``,
  src/model/linear_attention/linear_attention.py ``quadratic_attention``
The vision references convolve the values over the 2-D window; for sequences the oracle uses the 1-D
depthwise convolution our modules use (kernel 5, centred, one filter per head channel shared by the heads).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import attention_zoo
from benchmarks.parity import relative_error

B, H, D, N = 2, 2, 8, 24
C = H * D
TOL = 1e-5


def split(x: torch.Tensor) -> torch.Tensor:
    """``(B, N, C)`` -> ``(B, H, N, D)``."""
    return x.view(x.shape[0], x.shape[1], H, -1).transpose(1, 2)


def dwc(v: torch.Tensor, conv: torch.nn.Conv1d) -> torch.Tensor:
    """1-D depthwise conv over the sequence of every head's values ``(B, H, N, D)``, float64."""
    x = v.flatten(0, 1).transpose(1, 2)  # (B H, D, N)
    w, b = conv.weight.double(), conv.bias.double()
    return F.conv1d(x, w, b, padding=w.shape[-1] // 2, groups=w.shape[0]).transpose(1, 2).view_as(v)


def assert_parity(module, oracle, parts: int = 3, **call) -> None:
    """Outputs and gradients (w.r.t. the stacked projections) of ``module`` and the float64 ``oracle``."""
    x = torch.randn(B, N, parts * C)
    upstream = torch.randn(B, H, N, D)
    results = []
    for fn, dtype in ((oracle, torch.float64), (None, torch.float32)):
        leaf = x.to(dtype).requires_grad_(True)
        pieces = [split(t) for t in leaf.chunk(parts, dim=-1)]
        if fn is None:
            extra = {"gate": pieces[3]} if parts == 4 else {}
            out = module(*pieces[:3], **extra, **call)
        else:
            out = fn(leaf.chunk(parts, dim=-1))
        (out * upstream.to(dtype)).sum().backward()
        results.append((out.detach(), leaf.grad))
    assert relative_error(results[0][0], results[1][0]) < TOL
    assert relative_error(results[0][1], results[1][1]) < TOL


def test_flatten_matches_the_focused_linear_attention_of_flatten_swin():
    """x+ = (ReLU(x) + 1e-6) / softplus(s); f_p(x) = ||x|| x^p / ||x^p|| over all C channels; then
    z = 1 / (q . mean_j k_j + 1e-6), out = q (k^T / sqrt(N)) (v / sqrt(N)) z + DWC(v)."""
    attn = attention_zoo.build("flatten", head_dim=D, num_heads=H)
    with torch.no_grad():
        attn.scale.normal_(0, 0.5)

    def oracle(parts):
        q, k, v = parts  # (B, N, C)
        scale = F.softplus(attn.scale.double().reshape(C))
        feats = []
        for x in (q, k):
            x = (F.relu(x) + 1e-6) / scale
            norm = x.norm(dim=-1, keepdim=True)
            x = x**3
            feats.append(split(x / x.norm(dim=-1, keepdim=True) * norm))
        fq, fk = feats
        vh = split(v)
        z = 1 / (fq @ fk.mean(-2, keepdim=True).transpose(-1, -2) + 1e-6)
        kv = (fk.transpose(-1, -2) * N**-0.5) @ (vh * N**-0.5)
        return fq @ kv * z + dwc(vh, attn.dwc.conv)

    assert_parity(attn, oracle)


def test_polaformer_matches_pola_linear_attention_with_its_gate():
    """qkvg; x/softplus(s); p = 1 + alpha sigmoid(w); same-sign [q+, q-] on v1, opposite [q-, q+] on v2,
    each z = 1 / (q . mean_j [k+, k-] + 1e-6) with kv = k^T v / N; (x + DWC(v)) * g."""
    attn = attention_zoo.build("polaformer", head_dim=D, num_heads=H, alpha=3.0)
    with torch.no_grad():
        attn.scale.normal_(0, 0.5)
        attn.power_logit.normal_(0, 1.0)

    def oracle(parts):
        q, k, v, g = parts
        scale = F.softplus(attn.scale.double().reshape(C))
        power = 1 + 3.0 * torch.sigmoid(attn.power_logit.double())[None, :, None, :]  # (1, H, 1, D)
        q, k, vh = split(q / scale), split(k / scale), split(v)
        q_pos, q_neg, k_pos, k_neg = F.relu(q) ** power, F.relu(-q) ** power, F.relu(k) ** power, F.relu(-k) ** power
        q_sim, q_opp, kk = torch.cat([q_pos, q_neg], -1), torch.cat([q_neg, q_pos], -1), torch.cat([k_pos, k_neg], -1)
        v1, v2 = vh.chunk(2, dim=-1)
        outs = []
        for qq, vv in ((q_sim, v1), (q_opp, v2)):
            z = 1 / (qq @ kk.mean(-2, keepdim=True).transpose(-1, -2) + 1e-6)
            kv = (kk.transpose(-1, -2) * N**-0.5) @ (vv * N**-0.5)
            outs.append(qq @ kv * z)
        return (torch.cat(outs, -1) + dwc(vh, attn.dwc.conv)) * split(g)

    assert_parity(attn, oracle, parts=4)


def test_cosformer_matches_the_cos_reweighted_relu_attention():
    """q~_i = [relu(q_i) sin(pi i / 2M), relu(q_i) cos(pi i / 2M)], i = 1..L, M = L; out = q~ (k~^T v) /
    clamp(q~ . sum_j k~_j, 1e-6); no 1/sqrt(d)."""
    attn = attention_zoo.build("cosformer", head_dim=D, num_heads=H)

    def oracle(parts):
        q, k, v = (split(t) for t in parts)
        angle = math.pi / 2 * torch.arange(1, N + 1, dtype=torch.float64)[:, None] / N
        q_, k_ = (torch.cat([F.relu(x) * torch.sin(angle), F.relu(x) * torch.cos(angle)], -1) for x in (q, k))
        z = 1 / (q_ @ k_.sum(-2, keepdim=True).transpose(-1, -2)).clamp_min(1e-6)
        return q_ @ (k_.transpose(-1, -2) @ v) * z

    assert_parity(attn, oracle)


def test_linear_matches_elu_plus_one_linear_attention():
    """phi = elu + 1; out = phi(q) (sum_j phi(k_j) v_j^T) / (phi(q) . sum_j phi(k_j) + 1e-6)."""
    attn = attention_zoo.build("linear", head_dim=D, num_heads=H)

    def oracle(parts):
        q, k, v = (split(t) for t in parts)
        fq, fk = F.elu(q) + 1, F.elu(k) + 1
        return fq @ (fk.transpose(-1, -2) @ v) / (fq @ fk.sum(-2, keepdim=True).transpose(-1, -2) + 1e-6)

    assert_parity(attn, oracle)


def test_softmax_matches_scaled_dot_product_attention():
    """softmax(q k^T / sqrt(d)) v, as torch's scaled_dot_product_attention."""
    attn = attention_zoo.build("softmax", head_dim=D, num_heads=H)

    def oracle(parts):
        q, k, v = (split(t) for t in parts)
        return F.scaled_dot_product_attention(q, k, v)

    assert_parity(attn, oracle)


def test_skyformer_matches_the_official_forward_given_its_landmarks():
    """x = q, k scaled by d^(-1/4); AS = exp(X S^T - |X|^2/2 - |S|^2/2) over [Q; K] and the landmark rows;
    W = kappa(S, S) + 0.1 I, D^(-1/2) W D^(-1/2), 6 Newton-Schulz steps (Z0 = W^T / max colsum over the
    batch); out = AS_Q ((AS_K D^(-1/2) P D^(-1/2))^T v). The official code hard-codes d = 32."""
    attn = attention_zoo.build("skyformer", head_dim=D, num_heads=H, num_landmarks=8, seed=3).eval()
    indices = attn.landmarks_for(torch.zeros(B, H, N, D), None)  # (B, m): first half Q rows, then K rows

    def oracle(parts):
        q, k, v = (split(t) for t in parts)
        q, k = q * D**-0.25, k * D**-0.25
        x = torch.cat([q, k], dim=2)  # (B, H, 2N, D)
        rows = torch.cat([indices[:, :4], indices[:, 4:] + N], dim=1)  # official: K rows offset by n
        s = x[torch.arange(B)[:, None], :, rows].transpose(1, 2)  # (B, H, m, D)

        def kernel(a, b):
            return torch.exp(a @ b.transpose(-1, -2) - (a * a).sum(-1, keepdim=True) / 2
                             - (b * b).sum(-1)[..., None, :] / 2)

        a_s = kernel(x, s)
        w = kernel(s, s) + 0.1 * torch.eye(8, dtype=torch.float64)
        d_inv = w.sum(-1).rsqrt()
        w = d_inv[..., :, None] * w * d_inv[..., None, :]
        eye = torch.eye(8, dtype=torch.float64)
        z = w.transpose(-1, -2) / w.sum(-2).max()
        for _ in range(6):
            wz = w @ z
            z = 0.25 * z @ (13 * eye - wz @ (15 * eye - wz @ (7 * eye - wz)))
        right = (a_s[:, :, N:] * d_inv[..., None, :]) @ z * d_inv[..., None, :]
        return a_s[:, :, :N] @ (right.transpose(-1, -2) @ v)

    assert_parity(attn, oracle)


@pytest.mark.parametrize("causal", [False, True])
def test_based_matches_the_taylor_exp_linear_attention(causal):
    """Per head q W_q, k W_k (r = 16); TaylorExp phi(x) = [x^0, x / sqrt(sqrt(r)), (x x^T).flatten / sqrt(2) /
    sqrt(r)]; the official quadratic path: A = tril(phi_q phi_k^T), y = A v / (phi_q . cumsum(phi_k) + 1e-12).
    The official code is causal only; non-causal (LRA) drops the tril and sums over all keys."""
    attn = attention_zoo.build("based", head_dim=D, num_heads=H, causal=causal, chunk_size=8)
    r = attn.feature_dim

    def taylor_exp(x):
        x2 = (x.unsqueeze(-1) * x.unsqueeze(-2)).flatten(start_dim=-2) / math.sqrt(2)
        return torch.cat([x[..., :1] ** 0, x / math.sqrt(math.sqrt(r)), x2 / math.sqrt(r)], dim=-1)

    def oracle(parts):
        q, k, v = (split(t) for t in parts)
        fq = taylor_exp(torch.einsum("hdf,bhld->bhlf", attn.w_q.double(), q))
        fk = taylor_exp(torch.einsum("hdf,bhld->bhlf", attn.w_k.double(), k))
        a = torch.einsum("bhnd,bhmd->bhnm", fq, fk)
        keys = fk.cumsum(2) if causal else fk.sum(2, keepdim=True)
        if causal:
            a = torch.tril(a)
        y = torch.einsum("bhnm,bhme->bhne", a, v)
        return y / (torch.einsum("bhld,bhld->bhl", fq, keys.expand_as(fq)) + 1e-12)[..., None]

    assert_parity(attn, oracle)


@pytest.mark.parametrize("causal", [False, True])
def test_hedgehog_matches_lolcats_softmax_dim_feature_maps(causal):
    """Untied maps f(x W + b), W (H, d, f), b one scalar per head (lolcats' bias: ours is per feature, here
    set to a per-head constant); SoftmaxDim f(y) = [softmax(y), softmax(-y)].clamp(min=1e-12);
    quadratic_attention: a = phi_q phi_k^T (causal: zero above the diagonal), a / (a.sum(-1) + 1e-12), a v."""
    attn = attention_zoo.build("hedgehog", head_dim=D, num_heads=H, causal=causal, chunk_size=8)
    with torch.no_grad():  # spikier than the Kaiming init, so the softmaxes are far from uniform
        for w in (attn.w_q, attn.w_k):
            w.normal_(0, 1.0)
        for b in (attn.b_q, attn.b_k):
            b.copy_(torch.randn(H, 1).expand_as(b))

    def feature_map(x, layer, bias):
        y = torch.einsum("hdf,bhld->bhlf", layer.double(), x) + bias.double()[None, :, None, :1]
        return torch.cat([torch.softmax(y, dim=-1), torch.softmax(-y, dim=-1)], dim=-1).clamp(min=1e-12)

    def oracle(parts):
        q, k, v = (split(t) for t in parts)
        fq, fk = feature_map(q, attn.w_q, attn.b_q), feature_map(k, attn.w_k, attn.b_k)
        a = torch.einsum("bhmd,bhnd->bhmn", fq, fk)
        if causal:
            a = a.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), 0)
        a = a / (a.sum(dim=-1, keepdim=True) + 1e-12)
        return torch.einsum("bhmn,bhnd->bhmd", a, v)

    assert_parity(attn, oracle)
