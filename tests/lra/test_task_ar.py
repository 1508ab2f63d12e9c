"""The associative-recall task: generator invariants, causal token-level model, end-to-end runs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from pytorch_lightning.utilities.exceptions import SIGTERMException

from lra.run.callbacks import CheckpointOnPreemption
from lra.run.train import run
from lra.tasks import ar
from lra_base.errors import UserError
from tests.lra.conftest import compose_run, signal_at_step

SHAPE = {"seq_len": 40, "num_pairs": 6, "vocab_size": 34}
AR_TINY = ["task=ar", "task.data.train=96", "task.data.val=32", "task.data.test=32", "task.batch_size=16"]


def test_every_query_target_is_the_value_paired_with_its_key():
    split = ar.make_mqar(50, seed=3, **SHAPE)
    keys, values = ar.vocabulary(SHAPE["vocab_size"])
    tokens = split.tokens.reshape(50, SHAPE["seq_len"])
    targets = split.extra["targets"]
    p = SHAPE["num_pairs"]
    for row, target in zip(tokens, targets):
        context = dict(zip(row[0 : 2 * p : 2].tolist(), row[1 : 2 * p : 2].tolist()))
        assert len(context) == p and set(context) <= set(keys) and set(context.values()) <= set(values)
        queries = np.flatnonzero(target != ar.IGNORE)
        assert len(queries) == p and queries.min() >= 2 * p
        assert sorted(row[queries].tolist()) == sorted(context)  # each key asked exactly once
        assert all(target[i] == context[row[i]] for i in queries)
        others = np.setdiff1d(np.arange(2 * p, SHAPE["seq_len"]), queries)
        assert (row[others] == ar.BLANK).all()


def test_generation_is_deterministic_per_seed_and_differs_across_seeds():
    a, b, c = (ar.make_mqar(20, seed=s, **SHAPE) for s in (1, 1, 2))
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.extra["targets"], b.extra["targets"])
    assert not np.array_equal(a.tokens, c.tokens)


@pytest.mark.parametrize(("change", "message"), [({"num_pairs": 20}, "raise task.vocab_size"),
                                                  ({"seq_len": 15}, "task.seq_len >= 18")])
def test_impossible_shapes_name_the_fix(change, message):
    with pytest.raises(UserError, match=message):
        ar.make_mqar(4, seed=0, **{**SHAPE, **change})


def test_the_model_is_causal_so_a_query_cannot_see_later_tokens():
    cfg = compose_run(["task=ar", "attention=linear", "model.dropout=0.0"])
    model = ar.LitModule(cfg, 66, 66).eval()
    tokens = torch.randint(2, 66, (2, 64))
    batch = {"tokens": tokens, "lengths": torch.full((2,), 64)}
    changed = tokens.clone()
    changed[:, 40:] = torch.randint(2, 66, (2, 24))
    with torch.no_grad():
        before, after = model(batch), model({**batch, "tokens": changed})
    assert before.shape == (2, 64, 66)
    torch.testing.assert_close(before[:, :40], after[:, :40])
    assert not torch.allclose(before[:, 40:], after[:, 40:])


def test_non_causal_attention_is_refused_with_its_reason():
    from lra.module import check_attention_builds

    with pytest.raises(UserError, match="nystrom cannot be causal"):
        check_attention_builds(compose_run(["task=ar", "attention=nystrom"]))  # lra.build, before any data


@pytest.mark.parametrize("attention", ["softmax", "llops", "based"])
def test_fast_dev_run_scores_queries_only(attention, tmp_path):
    cfg = compose_run([*AR_TINY, f"attention={attention}", "trainer=debug"])
    record = run(cfg, tmp_path)
    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved["status"] == record["status"] == "completed" and saved["task"] == "ar"
    assert 0.0 <= saved["metrics"]["test_acc"] <= 1.0
    assert 0.0 < saved["metrics"]["majority_acc"] < 0.2  # about 1 / 32 values


def test_softmax_learns_recall_within_a_few_hundred_steps(tmp_path):
    cfg = compose_run(["task=ar", "attention=softmax", "task.seq_len=24", "task.num_pairs=4",
                       "task.vocab_size=18", "task.data.train=2000", "task.data.val=100", "task.data.test=100",
                       "task.max_steps=500", "task.eval_every=250", "task.optim.lr=3e-3",
                       "task.optim.warmup_steps=50", "model.dropout=0.0", "trainer.enable_progress_bar=false"])
    record = run(cfg, tmp_path)
    assert record["metrics"]["test_acc"] > 3 * record["metrics"]["majority_acc"]


def test_an_interrupted_run_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch):
    """The per-token read-out is the task's (``fixed_pooling``), not a rewrite of the saved config: the checkpoint
    holds the composed settings, so the rerun resumes instead of being refused as a run of other settings."""
    cfg = compose_run([*AR_TINY, "attention=linear", "task.max_steps=12", "task.eval_every=4",
                       "trainer.enable_progress_bar=false"])
    reference = run(cfg, tmp_path / "reference")["metrics"]
    with monkeypatch.context() as patch:
        patch.setattr(CheckpointOnPreemption, "on_train_batch_start", signal_at_step(7), raising=False)
        with pytest.raises(SIGTERMException):
            run(cfg, tmp_path / "resumed")
    saved = torch.load(tmp_path / "resumed" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert saved["hyper_parameters"]["cfg"]["model"]["pooling"] == cfg.model.pooling
    got = run(cfg, tmp_path / "resumed")
    assert got["status"] == "completed" and got["steps"] == 12
    for metric in ("val_acc", "test_acc", "test_loss"):
        assert got["metrics"][metric] == reference[metric], metric
