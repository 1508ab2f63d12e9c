"""The encoder: pooling over real tokens only, padding invariance end to end, the LR schedule."""

from __future__ import annotations

import pytest
import torch

from lra.model import Encoder, masked_mean
from lra.module import attention_factory
from tests.conftest import assert_close
from tests.lra.conftest import compose_run


def test_masked_mean_ignores_padding():
    x = torch.randn(2, 5, 3)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert_close(x[0, :3].mean(0), masked_mean(x, mask)[0], ratio=1e-6)
    assert_close(x[1].mean(0), masked_mean(x, mask)[1], ratio=1e-6)


@pytest.mark.parametrize("attention", ["softmax", "linear", "based", "llops"])
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_encoder_output_does_not_depend_on_padding(attention, pooling):
    run = compose_run([f"attention={attention}", "model.dim=32", "task.max_len=64"])
    torch.manual_seed(0)
    enc = Encoder(vocab_size=16, max_len=64, dim=32, depth=2, num_heads=2, ffn_dim=64, dropout=0.1,
                  make_attention=attention_factory(run), pooling=pooling).eval()
    tokens = torch.randint(1, 16, (1, 20))
    alone = enc(tokens, torch.tensor([20]))
    padded = torch.cat([tokens, torch.randint(0, 16, (1, 25))], dim=1)  # garbage after the real tokens
    batched = enc(padded, torch.tensor([20]))
    assert_close(alone, batched, ratio=1e-5, what=attention)


def test_pad_token_zero_is_a_real_token_when_inside_the_length():
    """Masks come from lengths, not token values: id 0 inside the length changes the output."""
    run = compose_run(["model.dim=32", "task.max_len=64"])
    enc = Encoder(vocab_size=16, max_len=64, dim=32, depth=1, num_heads=2, ffn_dim=64, dropout=0.0,
                  make_attention=attention_factory(run)).eval()
    tokens = torch.tensor([[3, 4, 0, 0]])
    assert not torch.allclose(enc(tokens, torch.tensor([2])), enc(tokens, torch.tensor([4])))


@pytest.mark.parametrize("attention", ["softmax", "llops", "local"])
def test_checkpointed_blocks_give_the_same_outputs_and_gradients_in_training(attention):
    """Recomputed blocks draw the same dropout (and attention-dropout) masks: identical numbers, less memory."""
    run = compose_run([f"attention={attention}", "model.dim=32", "model.attention_dropout=0.2", "task.max_len=64"])
    tokens, lengths = torch.randint(1, 16, (3, 40)), torch.tensor([40, 31, 12])
    results = []
    for checkpoint_blocks in (False, True):
        torch.manual_seed(0)
        enc = Encoder(vocab_size=16, max_len=64, dim=32, depth=2, num_heads=2, ffn_dim=64, dropout=0.3,
                      make_attention=attention_factory(run), checkpoint_blocks=checkpoint_blocks).train()
        torch.manual_seed(1)
        out = enc(tokens, lengths)
        out.square().sum().backward()
        results.append((out.detach(), [p.grad.clone() for p in enc.parameters()]))
    (plain, plain_grads), (recomputed, recomputed_grads) = results
    assert torch.equal(plain, recomputed)
    assert all(torch.allclose(a, b, rtol=1e-6, atol=1e-7) for a, b in zip(plain_grads, recomputed_grads, strict=True))


@pytest.mark.parametrize("attention", ["llops", "linformer", "performer", "softmax"])
def test_the_attention_is_built_once_per_layer_and_its_check_draws_no_random_numbers(attention, monkeypatch):
    import attention_zoo
    from lra.module import build_encoder, check_attention_builds

    real_build, built = attention_zoo.build, []

    def counting_build(*args, **kwargs):
        module = real_build(*args, **kwargs)
        built.append(next(iter(module.parameters()), torch.empty(0)).is_meta)
        return module

    monkeypatch.setattr(attention_zoo, "build", counting_build)
    run = compose_run([f"attention={attention}", "model.depth=3", "task.max_len=64"])
    torch.manual_seed(0)
    state = torch.random.get_rng_state()
    check_attention_builds(run)  # the up-front check of what only the constructor knows (lra.build)
    assert torch.equal(state, torch.random.get_rng_state()) and built == [True]
    built.clear()
    build_encoder(run, vocab_size=16)
    assert built == [False, False, False]  # one module per layer, no check of its own
