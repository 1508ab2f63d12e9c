"""Hand-made `result.json` records for the results tests."""

import json
from pathlib import Path


def write_record(root, task, attention, seed, test_acc=None, *, tag="quick", status="completed", **extra):
    """Write `root/<task>/<attention>/seed<seed>[-<tag>]/result.json` the way run.py does."""
    metrics = {} if test_acc is None else {"val_acc": test_acc, "test_acc": test_acc, "majority_acc": 0.17}
    record = {
        "task": task, "attention": attention, "seed": seed, "status": status, "error": None,
        "metrics": metrics, "config": {"tag": tag, "seed": seed}, "git_sha": "abc123",
        "wall_time_s": 12.5, "params": 1000, "tokens_per_s": 5e4, **extra,
    }
    run_dir = Path(root) / task / attention / f"seed{seed}-{tag}"
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "result.json").write_text(json.dumps(record))
    return run_dir / "result.json"
