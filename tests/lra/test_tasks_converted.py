"""Text, Retrieval and Image end to end on converter output of tiny official-format fixtures: fast_dev_run
per attention and the dual encoder's structure (setup and error paths: test_converted_setup.py)."""

from __future__ import annotations

import json

import pytest
import torch

from lra.run.train import run
from lra.settings import Run
from lra.tasks import image as image_task
from lra.tasks import retrieval as retrieval_task
from lra.tasks import text as text_task
from tests.data_prep.official_fixtures import convert_all
from tests.lra.conftest import compose_run

TASKS = {"text": text_task, "retrieval": retrieval_task, "image": image_task}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    """One data root with all three tasks converted from fixtures in the official formats."""
    return convert_all(tmp_path_factory.mktemp("sources"), tmp_path_factory.mktemp("data"))


def config(task: str, data_root, *overrides: str) -> Run:
    return compose_run([f"task={task}", "experiment=quick", f"data_dir={data_root}", "task.batch_size=4",
                        *overrides])


@pytest.mark.parametrize("attention", ["softmax", "llops"])
@pytest.mark.parametrize("task", list(TASKS))
def test_fast_dev_run(task, attention, data_root, tmp_path):
    shorter = [] if task == "image" else ["task.max_len=128"]  # an image is always 1024 pixels
    record = run(config(task, data_root, f"attention={attention}", "trainer=debug", *shorter), tmp_path)
    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved["status"] == record["status"] == "completed"
    assert saved["task"] == task and saved["attention"] == attention
    assert 0.0 <= saved["metrics"]["test_acc"] <= 1.0 and 0.0 < saved["metrics"]["majority_acc"] < 1.0


@pytest.fixture()
def dual_model_and_batch(data_root):
    cfg = config("retrieval", data_root, "model.dropout=0.0", "task.max_len=4000")
    data = retrieval_task.DataModule(cfg)
    data.prepare_data()
    data.setup()
    batch = next(iter(data.val_dataloader()))
    assert batch["tokens"].shape[1] != batch["tokens2"].shape[1]  # the two documents are padded differently
    model = retrieval_task.LitModule(cfg, data.vocab_size, data.num_classes).eval()
    return model, batch


def head_input(model, batch) -> torch.Tensor:
    seen = []
    handle = model.head[0].register_forward_pre_hook(lambda _module, args: seen.append(args[0]))
    with torch.no_grad():
        model(batch)
    handle.remove()
    return seen[0]


def test_dual_encoder_head_sees_u_v_product_difference(dual_model_and_batch):
    model, batch = dual_model_and_batch
    with torch.no_grad():  # each document alone, at its own padded width
        u = model.encoder(batch["tokens"], batch["lengths"])
        v = model.encoder(batch["tokens2"], batch["lengths2"])
    features = head_input(model, batch)
    d = u.shape[1]
    assert features.shape == (len(u), 4 * d) and model.head[0].in_features == 4 * d
    for got, want in zip(features.split(d, dim=1), (u, v, u * v, u - v)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_swapping_documents_swaps_u_and_v(dual_model_and_batch):
    model, batch = dual_model_and_batch
    swapped = {**batch, "tokens": batch["tokens2"], "lengths": batch["lengths2"],
               "tokens2": batch["tokens"], "lengths2": batch["lengths"]}
    u, v, product, difference = head_input(model, batch).chunk(4, dim=1)
    u_s, v_s, product_s, difference_s = head_input(model, swapped).chunk(4, dim=1)
    torch.testing.assert_close(u_s, v, rtol=1e-5, atol=1e-5)  # one shared encoder, whatever the position
    torch.testing.assert_close(v_s, u, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(product_s, product, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(difference_s, -difference, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(u, v)


def test_retrieval_counts_tokens_of_both_documents(dual_model_and_batch):
    model, batch = dual_model_and_batch
    model.train()
    with pytest.warns(UserWarning, match="not registered"):  # self.log without a Trainer is skipped
        loss = model.training_step(batch, 0)
    assert torch.isfinite(loss)
    assert model.train_tokens == int(batch["lengths"].sum() + batch["lengths2"].sum())
