"""A report card for one attention: what a reviewer asks of a new mechanism, on one page (issue 59).

``python -m analyses.report_card attention=NAME [attention.OPTION=VALUE ...] [--quick] [--seeds N]
[--baseline NAME] [--jobs N] [--sections correctness cost learning] [--tables DIR | --committed] [key=value ...]
[listops:key=value ...] [ar:key=value ...]``

- correctness (``_card_checks``): its own oracle (outputs, gradients), one real token, padding invariance, batch
  independence, causal (the masked oracle and no leakage where it claims ``causal``, else a refusal), finite
  outputs and gradients at 16,384 tokens in fp32 and under bf16 autocast on the CPU with the error against fp32,
  and fp16 and bf16 on CUDA (skipped, and said so, without a GPU). Each is a plain pass or fail with its number; a
  check that raises is reported as that check's failure.
- cost (``_card_cost``, ``benchmarks.attention``'s measurement): forward+backward time and memory against
  length, 1k-16k, beside softmax, linear and ``--baseline``, with the fitted growth exponents.
- learning (``_card_learning``): quick ListOps and quick MQAR (``task=ar``) beside the same baselines, seeds
  ``0..N-1``; every run lives in the folder ``run.py`` gives it and is reused when it is there (or committed).

``--quick`` shortens all three (3 lengths, 1 timing each, 500 training steps). Other ``key=value`` words are Hydra
overrides for every composed config (``data_dir=...``, ``hydra.searchpath=[file://DIR/conf]`` for an attention
outside the repository, imported first as README "Outside the repository" shows); ``listops:``/``ar:`` words go to
that task's runs only. Writes the record ``outputs/analyses/report_card_<NAME>/result.json``, asks ``python -m
results`` for its table (``<tables>/report_card_<NAME>.{md,csv}``) and writes the card,
``<tables>/report_cards/<NAME>.md`` with its figures (tables: ``outputs/tables``; ``--committed``:
``results/tables``, the record under ``results/runs/analyses/``). Exit 0 when every check passed or was skipped,
1 when the card reports a failure, 2 for a bad request (an unknown attention: one line listing the valid names).
``<NAME>`` is the attention's, with a digest of its ``attention.*`` words, and ``_quick`` or a digest of the other
options that change what is measured (``--sections``, ``--long``, ``--seeds``, ``--baseline``, ...) and of the other
overrides but Hydra's own ``hydra.*`` (``data_dir=...`` too: the data may differ): a shorter, partial, larger or
otherwise-made card has its own record and page, never the full card's.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from lra.identity import digest
from lra.run.outputs import TABLES
from lra.run.run_files import COMMITTED_RUNS

from . import _card_cost, _card_learning
from ._card_page import headline, page, write_page
from .record import ANALYSIS_ROOT, tabulate, write_analysis_record

NAME = "report_card"
SECTIONS = ("correctness", "cost", "learning")
BASELINES = ("softmax", "linear")
SCALE = ("quick", "seeds", "baseline", "sections", "long", "lengths", "repeats", "device")  # what changes the card
NOTES = [
    "verdict: pass or fail against the bound in detail; skipped with the reason; blank for a measurement.",
    "correctness: relative RMSE = rms(ref - out) / rms(ref) over real tokens (analyses/_card_checks.py); the "
    "mechanism at its yaml options, eval mode, B 2-3, heads and head dim of the model ({heads} x {head_dim}).",
    "learning: test accuracy (%) of the best-validation checkpoint; runs reused from their run.py folders.",
]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m analyses.report_card", description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="attention=NAME (required), attention.OPTION=VALUE, other Hydra "
                                                     "overrides, listops:key=value, ar:key=value")
    parser.add_argument("--quick", action="store_true", help="the ~10-minute card: 3 lengths, 500 training steps")
    parser.add_argument("--seeds", type=int, default=1, help="training seeds 0..N-1 per task and attention (default 1)")
    parser.add_argument("--baseline", default=None, help="one more attention to compare with, beside softmax, linear")
    parser.add_argument("--jobs", type=int, default=2, help="training runs at a time, one thread each (default 2)")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="default: all")
    parser.add_argument("--long", type=int, default=16384, help="tokens of the long checks (default 16384)")
    parser.add_argument("--lengths", type=int, nargs="+", default=None,
                        help="cost lengths (default 1k-16k by doubling; --quick: 1k, 4k, 16k)")
    parser.add_argument("--repeats", type=int, default=None, help="timings per length (default 3; --quick 1)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the cost is measured")
    parser.add_argument("--out-root", default=None, help=f"record root (default {ANALYSIS_ROOT}; with --committed "
                                                          f"results/runs/analyses)")
    TABLES.add_to(parser)
    args = parser.parse_intermixed_args(argv)
    args.tables = TABLES.choose(parser, args)
    if args.out_root is None:
        args.out_root = str(COMMITTED_RUNS / "analyses") if args.committed else str(ANALYSIS_ROOT)
    if args.seeds < 1 or args.jobs < 1:
        parser.error("--seeds and --jobs must be at least 1")
    return args


class BadRequest(Exception):
    """A request the card refuses before measuring anything: one line, exit 2."""


def split_overrides(words: list[str]) -> tuple[str, list[str], list[str]]:
    """The attention's name, its own ``attention.*`` words and the rest."""
    names = [word.split("=", 1)[1] for word in words if word.startswith("attention=")]
    if len(names) != 1 or not names[0] or "," in names[0]:
        raise BadRequest("give exactly one attention=NAME (a card is for one mechanism; --baseline adds another)")
    own = [word for word in words if word.lstrip("+").startswith("attention.")]  # +attention.X: an option the
    rest = [word for word in words if word not in own and not word.startswith("attention=")]  # yaml leaves out
    return names[0], own, rest


def card_label(name: str, own: list[str], options: list[str] = ()) -> str:
    """The attention's name, with a digest of its ``attention.*`` overrides when it has any (its own card), and
    ``_quick`` or a digest of the other ``options`` (``card_options``) when they make a card other than the full one,
    so that a shorter or partial card never replaces it."""
    label = name if not own else f"{name}-{digest(sorted(own), 8)}"
    if not options:
        return label
    return f"{label}_quick" if list(options) == ["--quick"] else f"{label}_{digest(list(options), 8)}"


def card_options(args: argparse.Namespace) -> list[str]:
    """The options, as typed on the command line, in which ``args`` differ from the full card's (the defaults), then
    the overrides other than the attention's and Hydra's own (``model.depth=1``, ``ar:task.max_steps=3000``): they
    change what is measured too."""
    defaults, words = parse_args([]), []
    for key in SCALE:
        value = getattr(args, key)
        if key == "sections":  # in the card's order, however typed
            value = [section for section in SECTIONS if section in value]
        if value == getattr(defaults, key):
            continue
        values = [] if value is True else list(value) if isinstance(value, list) else [value]
        words += [f"--{key}", *map(str, values)]
    rest = [word for word in args.overrides if not word.startswith("attention=")
            and not word.lstrip("+").startswith(("attention.", "hydra.", "hydra/"))]  # Hydra's own: where, not what
    return words + sorted(rest)


def mechanisms(name: str, own: list[str], baseline: str | None) -> dict[str, list[str]]:
    """Display label -> overrides selecting it: the card's attention first, then the baselines (no repeats)."""
    import attention_zoo

    chosen = {name + "".join(f",{word.lstrip('+').removeprefix('attention.')}" for word in own):
              [f"attention={name}", *own]}
    for other in (*BASELINES, *([baseline] if baseline else [])):
        try:
            attention_zoo.get(other)
        except ValueError as err:
            raise BadRequest(str(err)) from None
        if not (other == name and not own):
            chosen.setdefault(other, [f"attention={other}"])
    return chosen


def composed(overrides: list[str]):
    """``lra.config.compose_run``; Hydra's errors (a missing yaml, an unknown key) and a setting out of its range
    become a one-line BadRequest, as does an option only the constructor refuses (``check_attention_builds``)."""
    from lra.config import compose_run
    from lra.module import check_attention_builds

    try:
        run = compose_run(overrides)
        check_attention_builds(run)
    except Exception as err:  # noqa: BLE001 - Hydra raises several kinds; each is a bad request here
        raise BadRequest(f"{' '.join(overrides)}: {' '.join(str(err).split())[:400]}") from None
    return run


def shared(rest: list[str]) -> list[str]:
    """The overrides every composed config takes (not the ``TASK:`` ones)."""
    return [word for word in rest if not any(word.startswith(f"{task}:") for task in _card_learning.TASKS)]


def cost_section(chosen: dict[str, list[str]], rest: list[str], args, tables: Path, label: str):
    """Cost rows and the figure's path."""
    options = {}
    for shown, words in chosen.items():
        attention = composed([*words, *shared(rest)]).attention
        options[shown] = (attention.name, dict(attention.options))
    lengths = tuple(args.lengths or (_card_cost.QUICK_LENGTHS if args.quick else _card_cost.FULL_LENGTHS))
    repeats = args.repeats or (1 if args.quick else 3)
    rows, points = _card_cost.cost_rows(options, lengths, repeats=repeats, warmup=1, device=args.device, log=say)
    figure = None
    if points:
        figure = tables / "report_cards" / f"{label}_cost.png"
        _card_cost.plot(points, figure, args.device)
    return rows, figure, _card_cost.setup(repeats, 1, args.device)


def learning_plan(chosen: dict[str, list[str]], rest: list[str], args) -> dict:
    """The training runs, checked before any section measures: a run folder that holds other settings (a changed
    yaml) is a BadRequest naming it, not a traceback after the checks and timings."""
    from lra_base.errors import UserError

    from ._runs import expected_minutes

    jobs = _card_learning.plan(chosen, args.seeds, args.quick, rest)
    try:
        minutes, todo = expected_minutes(jobs, args.jobs)
    except UserError as err:  # rerun=true here would go to every mechanism's runs, the baselines' too
        raise BadRequest(f"{err} (on the card, rerun=true retrains every mechanism's runs: move that folder aside "
                         f"instead)") from None
    say(f"report_card: {len(jobs)} training runs ({len(jobs) - todo} reused), {args.jobs} at a time: expected "
        f"~{minutes:.0f} min")
    return jobs


def learning_section(jobs: dict, args, tables: Path, label: str):
    """Learning rows and the figure's path."""
    records, reused = _card_learning.train(jobs, args.jobs)
    rows = _card_learning.learning_rows(jobs, records, reused)
    figure = tables / "report_cards" / f"{label}_learning.png"
    _card_learning.plot(rows, figure)
    return rows, figure


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    started = time.time()
    args = parse_args(argv)
    try:
        name, own, rest = split_overrides(args.overrides)
        import attention_zoo

        try:
            attention_zoo.get(name)
        except ValueError as err:
            raise BadRequest(str(err)) from None
        chosen = mechanisms(name, own, args.baseline)
        card_run = composed([f"attention={name}", *own, *shared(rest)])
        jobs = learning_plan(chosen, rest, args) if "learning" in args.sections else {}
    except BadRequest as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    options = card_options(args)
    label, shown = card_label(name, own, options), next(iter(chosen))
    analysis = f"{NAME}_{label}"
    tables = Path(args.tables)
    model = card_run.model
    sizes = {"heads": model.heads, "head_dim": (model.qkv_dim or model.dim) // model.heads}
    rows, figures, notes = [], [], [note.format(**sizes) for note in NOTES]
    if "correctness" in args.sections:
        from ._card_checks import correctness_rows

        rows += correctness_rows(card_run, shown, args.long, log=say)
    if "cost" in args.sections:
        cost_rows, figure, how = cost_section(chosen, rest, args, tables, label)
        rows += cost_rows
        figures.append(figure)
        notes.append(how)
    if "learning" in args.sections:
        learning_rows, figure = learning_section(jobs, args, tables, label)
        rows += learning_rows
        figures.append(figure)
    config = {"attention": name, "overrides": args.overrides, "quick": args.quick, "seeds": args.seeds,
              "baseline": args.baseline, "sections": args.sections, "long": args.long, "jobs": args.jobs,
              "device": args.device, "mechanisms": list(chosen), "machine": machine()}
    record = write_analysis_record(analysis, rows, keys=["section", "check", "attention", "n"], config=config,
                                   started=started, out_root=args.out_root, notes=notes)
    table_md = tabulate(analysis, record, tables)[1]
    text = page(label, shown, rows, table_md, [f for f in figures if f is not None], args, options,
                time.time() - started)
    path = write_page(tables / "report_cards" / f"{label}.md", text)
    say(f"report_card: wrote {path} (record {record}, table {table_md})")
    print("\n".join(headline(rows, shown)))
    return 1 if any(row["verdict"] == "fail" for row in rows) else 0


def machine() -> dict[str, Any]:
    """Processor, cores, threads (``lra.run.machine``)."""
    import torch

    from lra.run.machine import describe

    return describe(torch.device("cpu"), 1)


if __name__ == "__main__":
    sys.exit(main())
