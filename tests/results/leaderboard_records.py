"""Made-up records for the leaderboard page's tests and its README screenshot (numbers are not measurements).

Tag `default`: six attentions on ListOps (softmax over two seeds; `my_attn` in no published table), three on
Text; tag `quick`: four on ListOps; a failed run whose fields carry markup; learning curves for four runs; one
analysis record with a figure beside it.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from analyses.record import write_analysis_record
from tests.results.records import write_record

FIGURE = Path(__file__).resolve().parents[2] / "results" / "tables" / "ar_ablation.png"
HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'
# (tag, task, attention, seed): (test accuracy, training tokens/s)
RUNS = {
    ("default", "listops", "softmax", 0): (0.372, 21_000), ("default", "listops", "softmax", 1): (0.382, 20_500),
    ("default", "listops", "nystrom", 0): (0.371, 48_000), ("default", "listops", "skyformer", 0): (0.388, 41_000),
    ("default", "listops", "linear", 0): (0.356, 66_000), ("default", "listops", "llops", 0): (0.391, 52_000),
    ("default", "listops", "my_attn", 0): (0.367, 80_000),
    ("default", "text", "softmax", 0): (0.641, 9_800), ("default", "text", "nystrom", 0): (0.655, 30_000),
    ("default", "text", "linear", 0): (0.620, 44_000),
    ("quick", "listops", "softmax", 0): (0.323, 19_000), ("quick", "listops", "nystrom", 0): (0.322, 30_000),
    ("quick", "listops", "linear", 0): (0.318, 41_000), ("quick", "listops", "llops", 0): (0.314, 33_000),
}
CURVES = (("default", "listops", "softmax", 0), ("default", "listops", "softmax", 1),
          ("default", "listops", "llops", 0), ("quick", "listops", "linear", 0))


def write_curve(record: Path, final: float, steps: int = 5) -> None:
    """A Lightning-style `csv/metrics.csv` beside the record: validation accuracy rising to `final`."""
    lines = ["step,train/loss,val/acc"] + [f"{250 * i - 1},,{final * (0.6 + 0.4 * i / steps):.4f}"
                                           for i in range(1, steps + 1)]
    (record.parent / "csv").mkdir(exist_ok=True)
    (record.parent / "csv" / "metrics.csv").write_text("\n".join(lines) + "\n")


def write_leaderboard_records(root: str | Path) -> Path:
    """Write the made-up records under `root` and return it."""
    root = Path(root)
    for (tag, task, attention, seed), (acc, speed) in RUNS.items():
        record = write_record(root / tag, task, attention, seed, acc, tag=tag, tokens_per_s=speed,
                              wall_time_s=3.6e8 / speed, params=200_000, git_sha="0123abc" + "0" * 33)
        if (tag, task, attention, seed) in CURVES:
            write_curve(record, acc)
    write_record(root / "default", "text", "skyformer", 0, status="failed", error=f"RuntimeError: {HOSTILE}\nmore",
                 git_sha=HOSTILE, config={"tag": "default", "seed": 0, "note": HOSTILE})
    analysis = write_analysis_record("demo_analysis", [{"method": "llops", "p": 2, "error": 0.125},
                                                       {"method": "based", "p": None, "error": 0.5}],
                                     keys=["method", "p"], config={}, started=time.time(),
                                     out_root=root / "analyses", notes=["Made-up rows, `code` and <b>markup</b>."])
    if FIGURE.is_file():
        shutil.copyfile(FIGURE, analysis.parent / "demo_analysis.png")
    return root
