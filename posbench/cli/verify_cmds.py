"""``bench.py verify [RUN ...]``: check posbench against the published numbers it reproduces.

Each entry of the references file (``posbench/references.yaml``; ``posbench.cli.references``) is
one line: ``pass``, ``fail`` or ``skipped`` (why), its id and what was compared. Entries about
posbench's code (ALiBi slopes, rotary frequencies) always run; entries about measured results
read the run folders given. Exit status 0 when nothing failed, 1 when an entry failed, 2 when the
references file or a run folder cannot be read (one line).
"""

from __future__ import annotations

import argparse

HELP = "check posbench against the published numbers it reproduces (posbench/references.yaml)"
EXAMPLES = (
    "examples:\n  python bench.py verify\n  python bench.py verify results/{suite}/<run-id> results/OTHER/<run-id>\n"
    "  python bench.py verify --references my_references.yaml\n"
    "exit status: 0 when nothing failed (skipped entries say why), 1 when an entry failed, 2 on bad input\n"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "runs",
        nargs="*",
        metavar="RUN",
        help="run folders (or folders above them) whose rows the measured references are checked against",
    )
    p.add_argument(
        "--references",
        metavar="FILE",
        default=None,
        help="a references file (default: posbench/references.yaml, shipped with posbench)",
    )


def cmd_verify(args) -> int:
    from posbench.cli import references

    version, entries = references.load(args.references)
    runs = None
    if args.runs:
        from posbench import tasks
        from posbench.report.rows import load_runs

        runs = load_runs(args.runs, find_task=tasks.find)  # a skipped line is named on stderr; a missing folder is one line
    results = references.check_all(entries, runs)
    width = max(len(r.id) for r in results)
    for r in results:
        print(f"{r.status:<8} {r.id:<{width}}  {r.detail}")
    counts = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "skipped")}
    source = args.references or references.DEFAULT_FILE
    print(
        f"{counts['pass']} passed, {counts['fail']} failed, {counts['skipped']} skipped "
        f"({len(results)} references, version {version} of {source})"
    )
    return 1 if counts["fail"] else 0
