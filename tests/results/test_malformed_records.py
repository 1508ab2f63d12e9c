"""One bad record (or metrics.csv, FIFO, symlink) is listed with its reason and the rest of the table is built."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from analyses.record import write_analysis_record
from results.__main__ import main as results_main
from results.analyses import find_analyses
from results.collect import collect
from tests.results.records import write_record

ROOT = Path(__file__).resolve().parents[2]
ROWS = [{"setting": "degree", "method": "llops", "p": 2, "accuracy": 50.0}]


def rewrite(path: Path, **fields) -> Path:
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))
    return path


def bad_records(root: Path) -> dict[Path, str]:
    """One bad record per way a record can be bad, each with a part of the reason it must be listed with."""
    deep = root / "deep" / "result.json"
    deep.parent.mkdir()
    deep.write_text("[" * 200_000 + "]" * 200_000)
    analysis = write_analysis_record("ar_ablation", ROWS, keys=["setting", "method", "p"], config={},
                                     started=time.time(), out_root=root / "analysis")
    return {
        rewrite(write_record(root, "listops", "softmax", 1, 0.5), config="junk"): "config is str",
        rewrite(write_record(root, "listops", "softmax", 2, 0.5), config=[1, 2]): "config is list",
        rewrite(write_record(root, "listops", "softmax", 3, 0.5), config={"tag": "quick", "trainer": [1]}):
            "config.trainer is list",
        rewrite(write_record(root, "listops", "softmax", 4, 0.5), seed=10**30): "outside [0, 4294967295]",
        rewrite(write_record(root, "listops", "softmax", 5, 0.5), params=10**400): "params=",
        deep: "nested too deeply",
        rewrite(analysis, published="lra_paper", keys=None): "keys",
    }


def test_each_bad_record_is_listed_with_its_reason_and_the_tables_are_built(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "tables"
    good = write_record(runs, "listops", "softmax", 0, 0.4)
    (good.parent / "metrics.csv").write_text("step,val/acc\n49,0.3\n")
    big_metric = write_record(runs, "listops", "softmax", 6, 0.9)
    rewrite(big_metric, metrics={"val_acc": 0.9, "test_acc": 0.9, "test_loss": 10**400})
    bad_curve = write_record(runs, "listops", "softmax", 7, 0.4)
    (bad_curve.parent / "metrics.csv").write_text("step,val/acc\nabc,0.3\n")
    expected = bad_records(runs)
    long, problems = collect([runs])
    listed = {Path(p.path): p.message for p in problems if p.kind == "malformed"}
    for path, reason in expected.items():
        assert reason in listed.get(path, ""), (path, listed.get(path))
    assert any(p.kind == "bad value" and "test_loss" in p.message for p in problems)
    assert set(long[long["status"] == "completed"]["seed"]) == {0, 7}
    assert find_analyses([runs]) == {}
    assert results_main([str(runs), "--out", str(out)]) == 0
    assert "40.00 ± 0.00 (n=2" in (out / "lra.md").read_text()  # seeds 0 and 7
    assert (out / "lra_quick_curves.png").is_file()  # seed 0's curve; seed 7's is left out with a warning


CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))
from results.collect import collect
_, problems = collect([sys.argv[1]])
for p in problems:
    print(p.kind, p.path, p.message)
"""


def test_a_fifo_or_a_link_to_dev_zero_named_result_json_is_listed_not_read(tmp_path):
    fifo, link = tmp_path / "fifo" / "result.json", tmp_path / "zero" / "result.json"
    fifo.parent.mkdir()
    link.parent.mkdir()
    os.mkfifo(fifo)
    link.symlink_to("/dev/zero")
    write_record(tmp_path, "listops", "softmax", 0, 0.4)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True,
                              timeout=60, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        raise AssertionError("collect hung on a FIFO named result.json") from None
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"malformed {fifo.as_posix()} not read: not a regular file" in done.stdout
    assert f"malformed {link.as_posix()} not read: a symbolic link" in done.stdout
    assert time.monotonic() - started < 60
