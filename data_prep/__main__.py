"""Command line: ``python -m data_prep <task> --out DIR [--source PATH] [--seed S] [size options]``, and
``python -m data_prep fetch <task>|all [--out DIR] [--mirror BASE_URL]`` (download the official files, then import).

Each task module in TASK_MODULES exposes ``add_arguments(parser)`` and ``main(args) -> int``; adding a
task is one line here. User errors (bad data, bad options) print one message on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time

from data_prep.compact import DataError

TASK_MODULES = {
    "listops": "data_prep.listops",
    "pathfinder": "data_prep.pathfinder",
    "pathx": "data_prep.pathx",
    "text": "data_prep.text",
    "retrieval": "data_prep.retrieval",
    "image": "data_prep.image",
    "fetch": "data_prep.fetch",
}


def build_parser() -> argparse.ArgumentParser:
    """Parser with one subcommand per task module."""
    parser = argparse.ArgumentParser(
        prog="python -m data_prep", description="Prepare LRA task data under DIR/<task>/."
    )
    tasks = parser.add_subparsers(dest="task", required=True, metavar="TASK")
    for task, module_name in TASK_MODULES.items():
        module = importlib.import_module(module_name)
        summary = (module.__doc__ or task).strip().splitlines()[0]
        task_parser = tasks.add_parser(
            task,
            help=summary,
            description=module.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(task_parser)
        task_parser.set_defaults(run=module.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv``, prepare one task, return the exit status."""
    args = build_parser().parse_args(argv)
    started = time.perf_counter()
    try:
        status = args.run(args)
    except (DataError, ValueError, OSError) as e:
        print(f"python -m data_prep {args.task}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"python -m data_prep {args.task}: interrupted", file=sys.stderr)
        return 130
    print(f"{args.task}: done in {time.perf_counter() - started:.1f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
