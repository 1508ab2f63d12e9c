"""The training-step benchmark runs end to end on tiny shapes (no timing is asserted)."""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks import step as step_bench
from lra.build import example_batch
from lra.config import compose_run


def test_bench_step_times_each_task_and_attention_and_the_pass_through_model(tmp_path, capsys):
    code = step_bench.main(["--tasks", "listops", "retrieval", "--attentions", "linear", "llops", "--batch", "2",
                            "--steps", "1", "--warmup", "0", "--experiment", "quick", "--out", str(tmp_path)])
    assert code == 0
    frame = pd.read_csv(tmp_path / "step_cpu.csv")
    assert list(frame[["task", "attention"]].itertuples(index=False, name=None)) == [
        ("listops", "linear"), ("listops", "llops"), ("retrieval", "linear"), ("retrieval", "llops")]
    assert (frame["step_ms"] > 0).all() and (frame["rest_ms"] > 0).all()
    retrieval = frame[frame.task == "retrieval"].iloc[0]
    assert retrieval["tokens_per_s"] * retrieval["step_ms"] / 1e3 == pytest.approx(2 * 2 * retrieval["length"])
    assert "tokens/s" in capsys.readouterr().out


def test_example_batches_are_full_length_real_tokens_laid_out_by_each_task():
    run = compose_run(["task=listops", "attention=llops", "experiment=quick"])
    batch = example_batch(run, 2, step_bench.VOCAB, step_bench.torch.Generator().manual_seed(0))
    assert batch["tokens"].shape == (2, run.task.max_len) and (batch["tokens"] > 0).all()
    pair = example_batch(compose_run(["task=retrieval", "experiment=quick"]), 2, 8, step_bench.torch.Generator())
    assert pair["tokens2"].shape == pair["tokens"].shape == (2, 256)  # the task lays out its own batches
    ar = compose_run(["task=ar"])
    recall = example_batch(ar, 2, 8, step_bench.torch.Generator())
    assert recall["targets"].shape == recall["tokens"].shape == (2, ar.task.own["seq_len"])


def test_default_tasks_come_from_the_task_registry_up_to_the_longest_length():
    tasks = step_bench.default_tasks()
    assert {"listops", "text", "retrieval", "image", "pathfinder", "ar"} <= set(tasks)
    assert "pathx" not in tasks  # 16384 tokens: only when --tasks names it


def test_a_step_in_micro_batches_counts_every_part(tmp_path):
    code = step_bench.main(["--tasks", "listops", "--attentions", "linear", "--batch", "4", "--steps", "2",
                            "--warmup", "1", "--experiment", "quick", "--out", str(tmp_path), "task.micro_batches=2"])
    assert code == 0
    row = pd.read_csv(tmp_path / "step_cpu.csv").iloc[0]
    assert row["batch"] == 4 and row["tokens_per_s"] * row["step_ms"] / 1e3 == pytest.approx(4 * row["length"])
    assert step_bench.main(["--tasks", "listops", "--attentions", "linear", "--batch", "3", "--experiment", "quick",
                            "--out", str(tmp_path), "task.micro_batches=2"]) == 2  # 3 does not split in 2
