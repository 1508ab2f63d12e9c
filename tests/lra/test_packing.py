"""Real tokens only between the embeddings and the final norm: the same outputs and gradients as each sequence
computed alone, and dropout masks drawn for real tokens only."""

from __future__ import annotations

import pytest
import torch

from lra.model import Encoder
from lra.module import attention_factory
from lra.packing import Packing
from tests.conftest import assert_close
from tests.lra.conftest import compose_run


def test_pack_then_unpack_keeps_real_rows_and_zeroes_pads():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.bool)
    x = torch.randn(3, 4, 5)
    packing = Packing(mask)
    packed = packing.pack(x)
    assert packed.shape == (8, 5)
    assert torch.equal(packed, x[mask])
    assert torch.equal(packing.unpack(packed), x * mask[..., None])


def test_without_padding_both_moves_are_views():
    x = torch.randn(2, 3, 4)
    packing = Packing(torch.ones(2, 3, dtype=torch.bool))
    assert packing.pack(x).data_ptr() == x.data_ptr() and packing.unpack(packing.pack(x)).data_ptr() == x.data_ptr()


def encoder(attention: str, pooling: str = "mean", dropout: float = 0.0, short_conv: int | None = None) -> Encoder:
    run = compose_run([f"attention={attention}", "model.dim=32", "task.max_len=64"])
    torch.manual_seed(0)
    return Encoder(vocab_size=16, max_len=64, dim=32, depth=2, num_heads=2, ffn_dim=64, dropout=dropout,
                   make_attention=attention_factory(run), pooling=pooling, short_conv=short_conv)


@pytest.mark.parametrize("attention", ["softmax", "linear", "llops", "based"])
@pytest.mark.parametrize("pooling, short_conv", [("mean", None), ("cls", None), ("mean", 4), ("cls", 3)])
def test_a_padded_batch_has_the_gradients_of_its_sequences_alone(attention, pooling, short_conv):
    enc = encoder(attention, pooling, short_conv=short_conv).train()  # dropout 0: the fused training paths, no masks
    lengths = [20, 33, 9]
    torch.manual_seed(1)
    seqs = [torch.randint(1, 16, (n,)) for n in lengths]
    weights = torch.randn(len(seqs), 32)
    tokens = torch.zeros(len(seqs), max(lengths), dtype=torch.long)
    for i, s in enumerate(seqs):
        tokens[i, : len(s)] = s
    (enc(tokens, torch.tensor(lengths)) * weights).sum().backward()
    batched = {name: p.grad.clone() for name, p in enc.named_parameters() if p.grad is not None}
    enc.zero_grad(set_to_none=True)
    for s, w in zip(seqs, weights):
        (enc(s[None], torch.tensor([len(s)]))[0] * w).sum().backward()
    alone = {name: p.grad for name, p in enc.named_parameters() if p.grad is not None}
    assert batched.keys() == alone.keys() and len(batched) > 10
    assert any(".conv." in name for name in batched) == (short_conv is not None)
    for name in batched:
        assert_close(alone[name], batched[name], ratio=1e-5, what=f"{attention} {name}")


def test_dropout_draws_masks_for_real_tokens_only():
    enc = encoder("softmax", dropout=0.1).train()
    counted = []
    hook = enc.dropout.register_forward_hook(lambda module, args, out: counted.append(args[0].shape))
    lengths = torch.tensor([5, 12])
    enc(torch.randint(1, 16, (2, 12)), lengths).sum().backward()
    hook.remove()
    assert counted == [torch.Size([17, 32])]
