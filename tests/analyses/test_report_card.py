"""``python -m analyses.report_card`` (issue 59): each check fails what it should, a crash is a failed check, the
record becomes a ``python -m results`` table, and the learning runs live in (and are reused from) run.py's folders.

The stand-in mechanism is plain softmax attention with switches that break one promise each (``leak``: causal in
name only; ``ignore_mask``: padded keys count; ``crash_at_one``: raises on a row of one real token). It is
registered for this file's tests only, from a yaml in a temporary ``conf/`` that Hydra finds through
``hydra.searchpath``, as an attention outside the repository would be (README "Outside the repository").
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from analyses import _card_cost, _card_learning, report_card
from analyses._card_page import verdict
from attention_zoo.registry import _REGISTRY, register
from results.__main__ import main as results_main
from tests.lra.conftest import TINY
from tests.results.records import write_record

NAME = "card_standin"
YAML = f"name: {NAME}\ncausal: false\nleak: false\nignore_mask: false\ncrash_at_one: false\n"
FAST = ["--long", "96", "--sections", "correctness"]


def naive_card_standin(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, *,
                       causal: bool = False, ignore_mask: bool = False) -> Tensor:
    """Softmax attention with the explicit weights; ``ignore_mask`` lets padded keys in."""
    scores = q.float() @ k.float().transpose(-1, -2) / math.sqrt(q.shape[-1])
    if key_padding_mask is not None and not ignore_mask:
        scores = scores.masked_fill(~key_padding_mask[:, None, None, :], float("-inf"))
    if causal:
        n = q.shape[-2]
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool, device=q.device).tril(), float("-inf"))
    return (scores.softmax(-1) @ v.float()).to(v.dtype)


class StandIn(nn.Module):
    """Softmax attention (arXiv 1706.03762) whose options each break one promise."""

    supports_causal = True
    quadratic = True

    def __init__(self, *, causal: bool = False, leak: bool = False, ignore_mask: bool = False,
                 crash_at_one: bool = False):
        super().__init__()
        self.causal, self.leak, self.ignore_mask, self.crash_at_one = causal, leak, ignore_mask, crash_at_one

    def forward(self, q, k, v, key_padding_mask=None):
        if self.crash_at_one and key_padding_mask is not None and bool((key_padding_mask.sum(-1) == 1).any()):
            raise RuntimeError("a row of one real token")
        return self.naive(q, k, v, key_padding_mask)

    def naive(self, q, k, v, key_padding_mask=None):
        return naive_card_standin(q, k, v, key_padding_mask, causal=self.causal and not self.leak,
                                  ignore_mask=self.ignore_mask)


@pytest.fixture()
def standin(tmp_path) -> str:
    """The stand-in registered, its yaml in ``tmp_path/conf``; the Hydra override that finds it."""
    (tmp_path / "conf" / "attention").mkdir(parents=True)
    (tmp_path / "conf" / "attention" / f"{NAME}.yaml").write_text(YAML)
    register(NAME)(StandIn)
    try:
        yield f"hydra.searchpath=[file://{tmp_path / 'conf'}]"
    finally:
        _REGISTRY.pop(NAME, None)


def card(tmp_path: Path, *argv: str) -> tuple[int, list[dict], str]:
    """Run the card with its files under ``tmp_path``: exit status, the record's rows, the page."""
    status = report_card.main([*argv, "--tables", str(tmp_path / "tables"), "--out-root", str(tmp_path / "records")])
    records = sorted((tmp_path / "records").glob("report_card_*/result.json"))
    pages = sorted((tmp_path / "tables" / "report_cards").glob("*.md"))
    rows = json.loads(records[0].read_text())["rows"] if records else []
    return status, rows, pages[0].read_text() if pages else ""


def label(*argv: str) -> str:
    """The card's name for these words (``card_label``)."""
    name, own, _ = report_card.split_overrides([word for word in argv if not word.startswith("-")] or ["attention=x"])
    return report_card.card_label(name, own, report_card.card_options(report_card.parse_args(list(argv))))


def by_check(rows: list[dict]) -> dict[str, dict]:
    return {row["check"]: row for row in rows if row["section"] == "correctness"}


def test_a_mechanism_that_keeps_its_promises_passes_every_check(tmp_path, standin):
    status, rows, page = card(tmp_path, f"attention={NAME}", standin, *FAST)
    checks = by_check(rows)
    assert status == 0, [(c, r["detail"]) for c, r in checks.items() if r["verdict"] == "fail"]
    assert {r["verdict"] for r in checks.values()} <= {"pass", "skipped"}
    assert checks["oracle: outputs"]["value"] == 0.0 and checks["causal: no leakage"]["verdict"] == "pass"
    assert checks["long: bf16 autocast (CPU)"]["value"] > 0  # bf16 rounds: a measured error, not a constant
    if not torch.cuda.is_available():
        assert checks["long: bf16 autocast (CUDA)"]["detail"] == "skipped: no CUDA device"
    assert "**Passes every check that ran**" in page


def test_a_leaky_causal_mechanism_is_reported_as_leaking(tmp_path, standin):
    status, rows, page = card(tmp_path, f"attention={NAME}", "attention.leak=true", standin, *FAST)
    checks = by_check(rows)
    assert status == 1
    assert checks["causal: no leakage"]["verdict"] == "fail" and checks["causal: no leakage"]["value"] > 1e-2
    assert checks["oracle: outputs"]["verdict"] == "pass"  # it matches its own (leaky) oracle: only this check sees it
    assert "**FAILS 1 of" in page and "**causal: no leakage**" in page


def test_a_mechanism_that_attends_to_pads_fails_padding_invariance_and_batch_independence(tmp_path, standin):
    status, rows, _ = card(tmp_path, f"attention={NAME}", "attention.ignore_mask=true", standin, *FAST)
    checks = by_check(rows)
    assert status == 1
    assert {c for c, r in checks.items() if r["verdict"] == "fail"} == {"padding invariance", "batch independence"}
    assert checks["padding invariance"]["value"] > 1e-2


def test_a_check_that_raises_is_that_checks_failure_and_the_card_is_still_written(tmp_path, standin):
    status, rows, page = card(tmp_path, f"attention={NAME}", "attention.crash_at_one=true", standin, *FAST)
    checks = by_check(rows)
    assert status == 1
    assert checks["one real token"]["verdict"] == "fail" and checks["one real token"]["value"] is None
    assert checks["one real token"]["detail"] == "raised RuntimeError: a row of one real token"
    assert checks["padding invariance"]["verdict"] == "pass"  # the other checks still ran
    assert "raised RuntimeError: a row of one real token" in page


def test_the_record_becomes_a_results_table_and_the_page_embeds_it(tmp_path, standin):
    card(tmp_path, f"attention={NAME}", standin, *FAST)
    shown = label(f"attention={NAME}", *FAST)
    table = tmp_path / "tables" / f"report_card_{shown}.md"
    page = (tmp_path / "tables" / "report_cards" / f"{shown}.md").read_text()
    assert table.is_file() and (tmp_path / "tables" / f"report_card_{shown}.csv").is_file()
    assert table.read_text().split("\n", 1)[1].strip() in page  # the page's numbers are the tabulated ones
    rebuilt = tmp_path / "rebuilt"
    assert results_main([str(tmp_path / "records"), "--out", str(rebuilt)]) == 0
    assert (rebuilt / table.name).read_text() == table.read_text()
    write_record(tmp_path / "records", "listops", "linear", 0, 0.3, tag="quick")  # a page needs one run
    assert results_main([str(tmp_path / "records"), "--out", str(tmp_path / "tables"), "--html"]) == 0
    html = (tmp_path / "tables" / "index.html").read_text()
    assert f'<a href="report_cards/{shown}.md">' in html  # the page links the card
    assert results_main([str(tmp_path / "records"), "--out", str(tmp_path / "no_card"), "--html"]) == 0
    assert 'href="report_cards/' not in (tmp_path / "no_card" / "index.html").read_text()  # no page, no link


def test_an_unknown_attention_is_one_line_listing_the_valid_names_and_exit_2(tmp_path, capsys):
    status, rows, _ = card(tmp_path, "attention=nope")
    err = capsys.readouterr().err
    assert status == 2 and rows == [] and not (tmp_path / "tables").exists()
    assert err.startswith("error: unknown attention 'nope'; valid names: ") and "softmax" in err
    assert err.count("\n") == 1


def test_cost_measures_every_mechanism_beside_the_baselines_with_its_exponent(tmp_path, standin):
    status, rows, page = card(tmp_path, f"attention={NAME}", standin, "--sections", "cost", "--lengths", "32", "64",
                              "--repeats", "1", "--baseline", "llops")
    assert status == 0
    times = {(r["attention"], r["n"]) for r in rows if r["check"] == "fwd+bwd time" and r["value"] > 0}
    assert times == {(a, n) for a in (NAME, "softmax", "linear", "llops") for n in (32, 64)}
    exponents = [r for r in rows if r["check"] == "time growth exponent"]
    assert [r["attention"] for r in exponents] == [NAME, "softmax", "linear", "llops"]
    assert all(r["value"] is not None for r in exponents)
    words = ["--sections", "cost", "--lengths", "32", "64", "--repeats", "1", "--baseline", "llops"]
    figure = f"{label(f'attention={NAME}', *words)}_cost.png"
    assert (tmp_path / "tables" / "report_cards" / figure).is_file() and figure in page


def test_the_growth_exponent_is_the_log_log_slope():
    assert _card_cost.growth_exponent([1024, 2048, 4096], [1.0, 4.0, 16.0]) == pytest.approx(2.0)
    assert _card_cost.growth_exponent([512, 1024, 2048, 4096], [3.0, 4.0, 8.0, 16.0]) == pytest.approx(1.0)
    assert _card_cost.growth_exponent([1024, 2048], [1.0, 2.0]) == pytest.approx(1.0)
    assert _card_cost.growth_exponent([1024], [1.0]) is None


def test_learning_runs_are_run_py_folders_so_the_committed_quick_runs_are_reused():
    jobs = _card_learning.plan({"softmax": ["attention=softmax"]}, 1, False, [])
    assert jobs["listops softmax seed0"][1] == Path("outputs/listops/softmax/seed0/quick")
    assert jobs["ar softmax seed0"][1] == Path("outputs/ar/softmax/seed0/default,model.short_conv=3,"
                                               "task.max_steps=1500,task.optim.lr=0.003,task.optim.warmup_steps=100")
    quick = _card_learning.plan({"llops,degree=2": ["attention=llops", "attention.degree=2"]}, 2, True,
                                ["ar:task.max_steps=7"])
    assert quick["listops llops,degree=2 seed1"][1] == Path(
        "outputs/listops/llops/seed1/quick,attention.degree=2,task.max_steps=500")
    run, folder = quick["ar llops,degree=2 seed0"]
    assert run.task.max_steps == 7 and "task.max_steps=7" in folder.name  # a TASK: word replaces the preset's
    assert "task.max_steps=500" not in folder.name


def test_learning_trains_once_and_the_next_card_reuses_the_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    tiny = [f"data_dir={tmp_path / 'data'}", "task.max_steps=2", "task.eval_every=2", "model.dim=16",
            "model.ffn_dim=16", *(f"listops:{word}" for word in TINY), "ar:task.data.train=32", "ar:task.batch_size=8",
            "ar:task.data.val=16", "ar:task.data.test=16", "--sections", "learning", "--jobs", "1", "--quick"]
    status, rows, page = card(tmp_path, "attention=linear", *tiny)
    assert status == 0, rows
    assert [(r["check"], r["attention"]) for r in rows] == [
        ("ListOps quick, 2 steps", "linear"), ("ListOps quick, 2 steps", "softmax"),
        ("MQAR (task=ar), 2 steps", "linear"), ("MQAR (task=ar), 2 steps", "softmax")]
    assert all(r["value"] is not None and "reused 0 of 1" in r["detail"] and r["majority"] > 0 for r in rows)
    figure = f"{label('attention=linear', *tiny)}_learning.png"  # its model and data words name the card too
    command = page.split("`python -m analyses.report_card ", 1)[1].split("`", 1)[0].split()
    assert command.count(f"data_dir={tmp_path / 'data'}") == command.count("model.dim=16") == 1  # before: twice
    assert (tmp_path / "tables" / "report_cards" / figure).is_file() and "majority class" in page
    assert (tmp_path / "outputs" / "ar" / "softmax" / "seed0").is_dir()
    status, rows, _ = card(tmp_path, "attention=linear", *tiny)
    assert status == 0 and all("reused 1 of 1" in r["detail"] and " git " in r["detail"] for r in rows)
    held = next((tmp_path / "outputs" / "listops" / "linear" / "seed0").glob("*/result.json"))
    record = json.loads(held.read_text())
    record["config"]["attention"]["eps"] = 0.5  # the run of a yaml since changed
    held.write_text(json.dumps(record))
    shutil.rmtree(tmp_path / "records")
    status, rows, _ = card(tmp_path, "attention=linear", *tiny, "--sections", "correctness", "learning")
    err = capsys.readouterr().err
    assert status == 2 and rows == [] and "error: " in err and "attention.eps" in err and "Traceback" not in err


def test_the_verdict_says_what_failed_with_its_number():
    rows = [{"section": "correctness", "check": "padding invariance", "attention": "x", "verdict": "fail",
             "value": 0.25, "measure": "relative RMSE", "detail": "bound 1e-4"},
            {"section": "correctness", "check": "long: fp16 autocast (CUDA)", "attention": "x", "verdict": "skipped",
             "value": None, "measure": "", "detail": "skipped: no CUDA device"},
            {"section": "cost", "check": "fwd+bwd time", "attention": "x", "verdict": "", "value": 1.0,
             "measure": "ms", "detail": ""}]
    lines = verdict(rows)
    assert lines[0] == "**FAILS 1 of 2 checks** (0 passed, 1 skipped):"
    assert lines[2] == "- **padding invariance**: 0.25 relative RMSE; bound 1e-4"
    assert verdict(rows[1:])[0] == "**Passes every check that ran** (0 passed, 1 skipped: no CUDA device)."


def test_committed_writes_the_tables_and_the_record_where_results_committed_reads_them():
    args = report_card.parse_args(["attention=linear", "--committed"])
    assert args.tables == Path("results/tables") and Path(args.out_root).parts[-3:] == ("results", "runs", "analyses")
    args = report_card.parse_args(["attention=linear"])
    assert args.tables == Path("outputs/tables") and args.out_root == "outputs/analyses"


def test_the_card_composes_the_mechanism_as_the_model_does():
    assert report_card.composed(["attention=llops", "attention.degree=2"]).attention.options["degree"] == 2
    with pytest.raises(report_card.BadRequest, match="degree"):
        report_card.composed(["attention=llops", "attention.degree=0"])
    assert report_card.card_label("llops", ["attention.degree=2"]).startswith("llops-")


def test_a_quick_or_partial_card_never_takes_the_full_cards_name():
    """Before, --quick or --sections correctness wrote report_card_llops over the full card (35 rows -> 11)."""
    assert label("attention=llops") == "llops" == label("attention=llops", "--jobs", "1")
    assert label("attention=llops", "--baseline", "nystrom") != "llops"  # more rows than the full card's
    assert label("attention=llops", "--sections", "learning", "cost", "correctness") == "llops"  # any order
    assert label("attention=llops", "--quick") == "llops_quick"
    partial = {label("attention=llops", *words) for words in (["--sections", "correctness"], ["--long", "96"],
                                                               ["--seeds", "3"], ["--device", "cuda"])}
    assert len(partial) == 4 and not partial & {"llops", "llops_quick"}
    assert report_card.card_options(report_card.parse_args(["attention=llops", "--long", "96", "--quick"])) == [
        "--quick", "--long", "96"]  # the page's command shows them


def test_a_card_of_other_model_or_training_settings_never_takes_the_full_cards_name():
    """Before, attention=llops model.depth=1 (or ar:task.max_steps=3000) was named llops and replaced the full card."""
    changed = {label("attention=llops", *words) for words in (["model.depth=1"], ["ar:task.max_steps=3000"],
                                                               ["seed=1"], ["model.depth=1", "seed=1"])}
    assert len(changed) == 4 and not changed & {"llops", "llops_quick"}
    assert label("attention=llops", "seed=1", "model.depth=1") == label("attention=llops", "model.depth=1", "seed=1")
    assert label("attention=llops", "attention.degree=2") == report_card.card_label("llops", ["attention.degree=2"])
    assert label("attention=llops", "hydra.searchpath=[file:///elsewhere]") == "llops"  # where configs are, not what


def test_an_option_the_yaml_leaves_out_is_the_cards_own():
    """+attention.chunk_size=64 (the spelling run.py names for it) labels the card, and never reaches the baselines."""
    name, own, rest = report_card.split_overrides(["attention=llops", "+attention.chunk_size=64", "seed=1"])
    assert (name, own, rest) == ("llops", ["+attention.chunk_size=64"], ["seed=1"])
    assert report_card.card_label(name, own) != "llops"
    chosen = report_card.mechanisms(name, own, None)
    assert list(chosen) == ["llops,chunk_size=64", "softmax", "linear"] and chosen["softmax"] == ["attention=softmax"]
    assert list(report_card.mechanisms("llops", ["attention.degree=2"], None)) == ["llops,degree=2", "softmax",
                                                                                    "linear"]
    assert list(report_card.mechanisms("linear", [], "linear")) == ["linear", "softmax"]


def test_a_learning_row_names_where_its_run_is_and_the_code_it_ran():
    """A run reused from results/runs was shown as folder outputs/..., and no row said which commit trained it."""
    jobs = _card_learning.plan({"softmax": ["attention=softmax"]}, 1, False, [])
    record = {"status": "completed", "metrics": {"test_acc": 0.3, "val_acc": 0.31, "majority_acc": 0.17},
              "wall_time_s": 60, "git_sha": "b3200bf0123", "run_dir": "results/runs/listops/softmax/seed0/quick"}
    records = {label: record for label in jobs}
    rows = _card_learning.learning_rows(jobs, records, set(jobs))
    assert rows and all(f"folder {record['run_dir']}" in r["detail"] for r in rows)
    assert all("git b3200bf" in r["detail"] for r in rows)
