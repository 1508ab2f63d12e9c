"""Parity with the reference packages: agreement and forward+backward speed (a benchmark, not a test).

Each case wires one of our mechanisms and the pip-installed implementation its paper or the LRA ports use
to the same input, copying weights and random draws (projections, rotations, random blocks, sorting
matrices) from ours into the reference. The input ``x`` ``(B, N, P H d)`` stacks the per-token
projections the block would make (``P = 3``: q, k, v); the references read their q, k, v as slices of it
(their input projections are replaced by slices), so both sides compute attention only and return
``(B, N, H d)``, before the output projection. ``compare`` reports the relative error of the outputs and of
the gradients with respect to ``x``; ``tests/attention_zoo/test_parity_packages.py`` asserts it on small
inputs. Every reference package is imported lazily, so this module costs nothing when they are absent.

    python -m benchmarks.parity                     # all cases, n = 2048 and 4096
    python -m benchmarks.parity --names reformer --lengths 2048 4096 --repeats 5
    python -m benchmarks.parity --check             # agreement only, small n

Mechanisms without a pip package (FLatten, PolaFormer, cosFormer, Skyformer, BASED, Hedgehog, linear, ...) are
checked in the tests against the formula of their paper, written out there, and have no speed column.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

import attention_zoo


class Slice(nn.Module):
    """Stands in for a reference's input projection: returns part ``index`` of ``parts`` of the last dim."""

    def __init__(self, index: int, parts: int):
        super().__init__()
        self.index, self.parts = index, parts

    def forward(self, x: Tensor) -> Tensor:
        width = x.shape[-1] // self.parts
        return x[..., self.index * width:(self.index + 1) * width]


def heads(x: Tensor, parts: int, num_heads: int) -> list[Tensor]:
    """``(B, N, P H d)`` -> ``P`` tensors ``(B, H, N, d)``."""
    b, n, _ = x.shape
    return list(x.view(b, n, parts, num_heads, -1).permute(2, 0, 3, 1, 4).unbind(0))


def merge(y: Tensor) -> Tensor:
    """``(B, H, N, d)`` -> ``(B, N, H d)``."""
    return y.transpose(1, 2).flatten(2)


@dataclass
class Pair:
    ours: Callable[[Tensor], Tensor]
    reference: Callable[[Tensor], Tensor]
    parts: int = 3  # projections stacked in x


@dataclass
class Case:
    name: str  # registry name
    package: str  # distribution whose version is reported
    what: str  # the reference object
    make: Callable[..., Pair]  # make(num_heads=, head_dim=, n=, seed=)
    options: str = ""


def _performer(kernel: str) -> Callable[..., Pair]:
    def make(*, num_heads: int, head_dim: int, n: int, seed: int, features: int = 256) -> Pair:
        from performer_pytorch.performer_pytorch import FastAttention

        ours = attention_zoo.build("performer", head_dim=head_dim, num_heads=num_heads, features=features,
                                   kernel=kernel, seed=seed).eval()
        ref = FastAttention(head_dim, nb_features=features, generalized_attention=kernel == "relu",
                            kernel_fn=nn.ReLU()).eval()
        ref.projection_matrix.copy_(ours.projection)
        return Pair(lambda x: merge(ours(*heads(x, 3, num_heads))),
                    lambda x: merge(ref(*heads(x, 3, num_heads))))
    return make


def _linformer(*, num_heads: int, head_dim: int, n: int, seed: int, proj_dim: int = 64) -> Pair:
    from linformer import LinformerSelfAttention

    torch.manual_seed(seed)
    ref = LinformerSelfAttention(dim=num_heads * head_dim, seq_len=n, k=proj_dim, heads=num_heads,
                                 dim_head=head_dim).eval()
    ref.to_q, ref.to_k, ref.to_v, ref.to_out = Slice(0, 3), Slice(1, 3), Slice(2, 3), nn.Identity()
    ours = attention_zoo.build("linformer", head_dim=head_dim, num_heads=num_heads, max_len=n, proj_dim=proj_dim)
    with torch.no_grad():  # the package shares E and F over heads: (n, k) each
        ours.proj_k.copy_(ref.proj_k.T.expand_as(ours.proj_k))
        ours.proj_v.copy_(ref.proj_v.T.expand_as(ours.proj_v))
    return Pair(lambda x: merge(ours(*heads(x, 3, num_heads))), ref)


def _local(*, num_heads: int, head_dim: int, n: int, seed: int, block_size: int = 64) -> Pair:
    from local_attention import LocalAttention

    ref = LocalAttention(window_size=block_size, causal=False, look_backward=0, look_forward=0)
    ours = attention_zoo.build("local", head_dim=head_dim, num_heads=num_heads, block_size=block_size)
    return Pair(lambda x: merge(ours(*heads(x, 3, num_heads))), lambda x: merge(ref(*heads(x, 3, num_heads))))


def _sinkhorn(*, num_heads: int, head_dim: int, n: int, seed: int, block_size: int = 64) -> Pair:
    """Values = keys: the package's ``SinkhornAttention`` sorts the keys in place of the values
    (``b_v_r = b_k_r.reshape(...)``), so only ``v = k`` compares the rest of it. Its sort net is replaced by
    ours (the package has its own, not the paper's), 7 rounds without Gumbel noise on both sides."""
    from sinkhorn_transformer.sinkhorn_transformer import SinkhornAttention

    torch.manual_seed(seed)
    ours = attention_zoo.build("sinkhorn", head_dim=head_dim, num_heads=num_heads, max_len=n,
                               block_size=block_size, sinkhorn_iters=7, sinkhorn_tol=0.0)
    ref = SinkhornAttention(block_size, num_heads * head_dim, head_dim, num_heads, n, non_permutative=False,
                            sinkhorn_iter=7).eval()

    class OurSortNet(nn.Module):
        keys: Tensor

        def forward(self, q, k, topk=1):
            real = torch.ones(self.keys.shape[0], self.keys.shape[2], dtype=torch.bool)
            return ours.permutation(self.keys, real).flatten(0, 1)  # (B H, M, M)

    sort_net = OurSortNet()
    ref.sort_net = sort_net

    def reference(x):
        q, k = heads(x, 2, num_heads)
        sort_net.keys = k
        return merge(ref(q, k, k))

    def mine(x):
        q, k = heads(x, 2, num_heads)
        return merge(ours(q, k, k))

    return Pair(mine, reference, parts=2)


def _bigbird(*, num_heads: int, head_dim: int, n: int, seed: int, block_size: int = 64,
             random_blocks: int = 3) -> Pair:
    from transformers import BigBirdConfig
    from transformers.models.big_bird.modeling_big_bird import BigBirdBlockSparseAttention, BigBirdModel

    from attention_zoo.bigbird import block_priorities
    from attention_zoo.bigbird import random_blocks as choose_random_blocks

    config = BigBirdConfig(hidden_size=num_heads * head_dim, num_attention_heads=num_heads, block_size=block_size,
                           num_random_blocks=random_blocks, attention_type="block_sparse",
                           max_position_embeddings=n, use_bias=False)
    ref = BigBirdBlockSparseAttention(config, seed=seed).eval()
    ref.query, ref.key, ref.value = Slice(0, 3), Slice(1, 3), Slice(2, 3)
    ours = attention_zoo.build("bigbird", head_dim=head_dim, num_heads=num_heads, block_size=block_size,
                               num_random_blocks=random_blocks, seed=seed)
    m = n // block_size
    idx, valid = choose_random_blocks(block_priorities(seed, num_heads, m), torch.tensor([m]), random_blocks)
    assert valid[0, :, 1:-1].all(), "bigbird parity needs enough blocks for every random draw"
    chosen = [idx[0, h, 1:-1].numpy() for h in range(num_heads)]  # HF: rows of query blocks 1 .. M - 2
    ref._bigbird_block_rand_mask_with_head = lambda **_: chosen
    per_head = iter(chosen * 1000)  # n in (1024, 3072, 4096): HF's "old plan" draws one head per call
    ref._bigbird_block_rand_mask = lambda *_, **__: next(per_head)
    masks = BigBirdModel.create_masks_for_block_sparse_attn(torch.ones(1, n), block_size)
    blocked, band, from_mask, to_mask = masks

    def reference(x):
        b = x.shape[0]
        parts = [t.expand(b, *t.shape[1:]) for t in (band, from_mask, to_mask, blocked, blocked)]
        return ref(x, *parts)[0]

    return Pair(lambda x: merge(ours(*heads(x, 3, num_heads))), reference)


def _reformer(*, num_heads: int, head_dim: int, n: int, seed: int, chunk_len: int = 64, n_hashes: int = 2) -> Pair:
    from transformers import ReformerConfig
    from transformers.models.reformer.modeling_reformer import LSHSelfAttention

    n_buckets = max(2, 2 ** ((2 * (n // chunk_len)).bit_length() - 1))
    config = ReformerConfig(attention_head_size=head_dim, num_attention_heads=num_heads,
                            hidden_size=2 * num_heads * head_dim, num_hashes=n_hashes, num_buckets=n_buckets,
                            lsh_attn_chunk_length=chunk_len, lsh_num_chunks_before=1, lsh_num_chunks_after=0,
                            hash_seed=seed, is_decoder=False, lsh_attention_probs_dropout_prob=0.0,
                            attn_layers=["lsh"])
    ref = LSHSelfAttention(config).eval()
    ref.query_key, ref.value = Slice(0, 2), Slice(1, 2)
    ours = attention_zoo.build("reformer", head_dim=head_dim, num_heads=num_heads, n_hashes=n_hashes,
                               chunk_len=chunk_len, n_buckets=n_buckets)
    generator = torch.Generator().manual_seed(seed)  # HF: torch.manual_seed(hash_seed); randn((H, d, R, nb/2))
    rotations = torch.randn(num_heads, head_dim, n_hashes, n_buckets // 2, generator=generator)
    ours.rotations.copy_(rotations.permute(0, 2, 1, 3))

    def mine(x):
        q, v = heads(x, 2, num_heads)
        return merge(ours(q, q, v))

    return Pair(mine, lambda x: ref(x).hidden_states, parts=2)


def _nystrom(*, num_heads: int, head_dim: int, n: int, seed: int, landmarks: int = 64) -> Pair:
    from transformers import NystromformerConfig
    from transformers.models.nystromformer.modeling_nystromformer import NystromformerSelfAttention

    torch.manual_seed(seed)
    config = NystromformerConfig(hidden_size=num_heads * head_dim, num_attention_heads=num_heads,
                                 num_landmarks=landmarks, segment_means_seq_len=n, conv_kernel_size=35,
                                 inv_coeff_init_option=False, attention_probs_dropout_prob=0.0)
    ref = NystromformerSelfAttention(config).eval()
    ref.query, ref.key, ref.value = Slice(0, 3), Slice(1, 3), Slice(2, 3)
    ours = attention_zoo.build("nystrom", head_dim=head_dim, num_heads=num_heads, num_landmarks=landmarks,
                               conv_kernel_size=35)
    with torch.no_grad():
        ours.conv.weight.copy_(ref.conv.weight)
    return Pair(lambda x: merge(ours(*heads(x, 3, num_heads))), lambda x: ref(x)[0])


class Stacked(nn.Module):
    """Stands in for a projection of a reference that takes one hidden state per token (Longformer's
    self-attention): part ``index`` of ``parts`` of the stacked input it finds in ``source["x"]``
    ``(N, B, P C)``, its first rows only when given fewer (the global queries: the first tokens). A fresh
    tensor, as a Linear's: the reference scales its queries in place."""

    def __init__(self, source: dict, index: int, parts: int):
        super().__init__()
        self.source, self.index, self.parts = source, index, parts

    def forward(self, h: Tensor) -> Tensor:
        x = self.source["x"]
        width = x.shape[-1] // self.parts
        return x[:h.shape[0], :, self.index * width:(self.index + 1) * width].clone()


def _longformer(*, num_heads: int, head_dim: int, n: int, seed: int, window: int = 512,
                num_global: int = 0) -> Pair:
    """HF's global tokens have their own projections (``query_global``, ...): both sets read the same q, k, v
    here, as ours has one set. Its mask: 0 local, > 0 global (the first ``num_global`` tokens)."""
    from transformers import LongformerConfig
    from transformers.models.longformer.modeling_longformer import LongformerSelfAttention

    width = num_heads * head_dim
    config = LongformerConfig(hidden_size=width, num_attention_heads=num_heads, attention_window=[window],
                              attention_probs_dropout_prob=0.0)
    ref = LongformerSelfAttention(config, layer_id=0).eval()
    source: dict = {}
    for index, names in enumerate((("query", "query_global"), ("key", "key_global"), ("value", "value_global"))):
        for name in names:
            setattr(ref, name, Stacked(source, index, 3))
    ours = attention_zoo.build("longformer", head_dim=head_dim, num_heads=num_heads, window=window,
                               num_global=num_global)
    mask = torch.zeros(1, n)
    mask[:, :num_global] = 10000.0

    def reference(x):
        source["x"] = x.transpose(0, 1)  # HF projects (N, B, C)
        b = x.shape[0]
        return ref(x[..., :width], attention_mask=mask.expand(b, n), is_index_masked=(mask < 0).expand(b, n),
                   is_index_global_attn=(mask > 0).expand(b, n), is_global_attn=num_global > 0)[0]

    return Pair(lambda x: merge(ours(*heads(x, 3, num_heads))), reference)


CASES = [
    Case("performer", "performer-pytorch", "FastAttention (softmax kernel)", _performer("softmax"),
         "kernel=softmax, m=256"),
    Case("performer", "performer-pytorch", "FastAttention (generalized, ReLU)", _performer("relu"),
         "kernel=relu, m=256"),
    Case("linformer", "linformer", "LinformerSelfAttention", _linformer, "k=64, E, F shared over heads"),
    Case("local", "local-attention", "LocalAttention(look_backward=0, look_forward=0)", _local, "block 64"),
    Case("sinkhorn", "sinkhorn-transformer", "SinkhornAttention (our sort net, v = k)", _sinkhorn,
         "block 64, 7 rounds"),
    Case("bigbird", "transformers", "BigBirdBlockSparseAttention (our random blocks)", _bigbird,
         "block 64, r=3"),
    Case("reformer", "transformers", "LSHSelfAttention (our rotations)", _reformer, "chunk 64, 2 hashes"),
    Case("nystrom", "transformers", "NystromformerSelfAttention", _nystrom, "64 landmarks, conv 35"),
    Case("longformer", "transformers", "LongformerSelfAttention", _longformer, "window 512, no global tokens"),
]


def version(package: str) -> str:
    try:
        return f"{package}=={importlib.metadata.version(package)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{package} (not installed)"


def relative_error(reference: Tensor, ours: Tensor) -> float:
    """``|ours - reference| / |reference|`` (Frobenius norms, float64)."""
    return float((ours.double() - reference.double()).norm() / reference.double().norm().clamp_min(1e-30))


def compare(pair: Pair, x: Tensor, seed: int = 0) -> dict[str, float]:
    """Relative errors of the output and of ``d <out, g> / d x`` for a random ``g``; float32."""
    results, outs = {}, []
    upstream = None
    for side in (pair.reference, pair.ours):
        leaf = x.clone().requires_grad_(True)
        out = side(leaf)
        if upstream is None:
            upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed))
        (out * upstream).sum().backward()
        outs.append((out.detach(), leaf.grad))
    results["output"] = relative_error(outs[0][0], outs[1][0])
    results["grad"] = relative_error(outs[0][1], outs[1][1])
    return results


def seconds(pair: Pair, x: Tensor, repeats: int, warmup: int = 1) -> tuple[float, float]:
    """Median wall times of forward + backward, ours and the reference's, measured alternately."""
    times: dict[str, list[float]] = {"ours": [], "reference": []}
    for i in range(warmup + repeats):
        for side, fn in (("ours", pair.ours), ("reference", pair.reference)):
            leaf = x.clone().requires_grad_(True)
            start = time.perf_counter()
            fn(leaf).sum().backward()
            if i >= warmup:
                times[side].append(time.perf_counter() - start)
    return statistics.median(times["ours"]), statistics.median(times["reference"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.parity", description=__doc__.split("\n")[0])
    parser.add_argument("--names", nargs="*", help="registry names (default: every case)")
    parser.add_argument("--lengths", nargs="*", type=int, default=[2048, 4096])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--check", action="store_true", help="agreement only, at n = 512")
    args = parser.parse_args(argv)
    cases = [c for c in CASES if not args.names or c.name in args.names]
    lengths = [512] if args.check else args.lengths
    print(f"B {args.batch}, H {args.heads}, head dim {args.head_dim}; fwd+bwd median of {args.repeats} "
          f"(ours and the reference alternately), torch threads {torch.get_num_threads()}")
    print("| mechanism | reference | options | n | rel. error out / grad | ours ms | reference ms | ours / ref |")
    print("|---|---|---|---:|---|---:|---:|---:|")
    for case in cases:
        for n in lengths:
            pair = case.make(num_heads=args.heads, head_dim=args.head_dim, n=n, seed=0)
            x = torch.randn(args.batch, n, pair.parts * args.heads * args.head_dim,
                            generator=torch.Generator().manual_seed(n))
            err = compare(pair, x)
            timing = "| | |"
            if not args.check:
                ours, ref = seconds(pair, x, args.repeats)
                timing = f"| {ours * 1e3:.0f} | {ref * 1e3:.0f} | {ours / ref:.2f} |"
            print(f"| {case.name} | {version(case.package)} {case.what} | {case.options} | {n} "
                  f"| {err['output']:.1e} / {err['grad']:.1e} {timing}", flush=True)


if __name__ == "__main__":
    main()
