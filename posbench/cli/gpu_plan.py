"""``python -m posbench.cli.gpu_plan``: the GPU workflow's plan (.github/workflows/gpu-bench.yml,
issue 69), as a module the tests run (tests/cli/test_gpu_plan.py):

    matrix  the bench job's legs: each suite's gpu profile estimated (posbench/run/gpu_time.py)
            and split into the fewest ``--shard i/n`` legs that each fit the job's limit; a suite
            no split fits (one case longer than a job) is one line and exit 2. Writes ``legs`` (the
            bench matrix) and ``suites`` (the report and publish matrix) to $GITHUB_OUTPUT, and a
            table of the estimates to stdout (the job summary)
    merge   the shards' run folders under a folder (one artifact each) joined into one run folder
            per suite and run id, ``DEST/<suite>/<run id>``: their rows one after another, run.json
            and env.json of the first; shards of different settings (run ids) are kept apart

Bad input is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from posbench.core.files import is_plain_name
from posbench.report.rows import find_run_dirs
from posbench.run import gpu_time
from posbench.run.suite import loading
from posbench.store.bounds import RowsError
from posbench.store.meta import read_run_meta

RUN_FILES = ("run.json", "env.json")


class Bad(Exception):
    """Bad input: one line, exit status 2."""


def _outputs(values: dict[str, str]) -> None:
    path = os.environ.get("GITHUB_OUTPUT")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.writelines(f"{key}={value}\n" for key, value in values.items())


def legs(suites: list[str], limit_minutes: float) -> tuple[list[dict], list[str]]:
    """(bench legs, lines of the estimate table) for ``suites``' gpu profiles within ``limit_minutes``
    a leg. A leg: ``{"suite", "shard": "i/n", "leg": "i-of-n", "minutes"}``."""
    out, table = [], ["| suite | cases | estimated GPU hours | legs |", "|---|---:|---:|---:|"]
    for name in suites:
        try:
            estimate = gpu_time.estimate(loading.resolve(loading.load(name), "gpu"))
        except (OSError, ValueError) as exc:  # SuiteError is a ValueError
            raise Bad(f"suite {name!r}: {exc}") from None
        n = estimate.shards_for(limit_minutes * 60)
        if n is None:
            longest = max(estimate.seconds.values()) / 3600
            raise Bad(
                f"suite {name}: its gpu profile has a case of about {longest:.1f} GPU hours, over a job's "
                f"{limit_minutes:g} minutes; allowed: profiles whose every case fits one job (shrink the profile)"
            )
        for i in range(n):
            minutes = round(estimate.shard_s(i, n) / 60)
            out.append({"suite": name, "shard": f"{i}/{n}", "leg": f"{i}-of-{n}", "minutes": minutes})
        table.append(f"| {name} | {len(estimate.cases)} | {estimate.total_s / 3600:.1f} | {n} |")
    return out, table


def merge(src: Path, dest: Path) -> list[Path]:
    """Join the run folders under ``src`` (each shard's) into ``dest/<suite>/<run id>/``; return those."""
    try:
        runs = sorted(find_run_dirs(src), key=lambda p: p.as_posix())
        suites = {run: read_run_meta(run) for run in runs}
    except RowsError as exc:
        raise Bad(str(exc)) from None
    if not runs:
        raise Bad(f"{src}: no run folder (cases.jsonl) under it; allowed: the bench legs' artifacts")
    joined: dict[Path, Path] = {}  # one target per suite and run id, in the order first seen
    for run in runs:
        meta = suites[run]
        if meta is None or not is_plain_name(meta.suite) or not is_plain_name(run.name):
            raise Bad(f"{run}: no run.json naming a plain suite name; allowed: run folders as bench.py writes them")
        target = dest / meta.suite / run.name
        if target not in joined:
            target.mkdir(parents=True, exist_ok=False)
            for name in RUN_FILES:
                if (run / name).is_file():
                    shutil.copyfile(run / name, target / name)
            joined[target] = target
        rows = (run / "cases.jsonl").read_bytes()
        with (target / "cases.jsonl").open("ab") as fh:
            fh.write(rows if rows.endswith(b"\n") or not rows else rows + b"\n")
    return list(joined.values())


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m posbench.cli.gpu_plan", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("matrix", help="the bench legs of SUITES' gpu profiles, each within the limit")
    m.add_argument("--suites", required=True, help='a JSON list of suite names, e.g. ["SUITE"]')
    m.add_argument("--limit-minutes", required=True, type=float, help="what one leg may take (the job's limit less setup)")
    g = sub.add_parser("merge", help="join the shards' run folders under SRC into DEST")
    g.add_argument("src", type=Path)
    g.add_argument("dest", type=Path)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "matrix":
            try:
                suites = json.loads(args.suites)
            except ValueError:
                suites = None
            if not (isinstance(suites, list) and suites and all(isinstance(s, str) for s in suites)):
                raise Bad(f'--suites {args.suites!r}: not a JSON list of suite names; allowed: e.g. ["SUITE"]')
            out, table = legs(suites, args.limit_minutes)
            _outputs({"legs": json.dumps(out), "suites": json.dumps(list(dict.fromkeys(suites)))})
            print("\n".join(table))
            print(f"{len(out)} legs, each within {args.limit_minutes:g} minutes")
        else:
            for run in merge(args.src, args.dest):
                print(f"joined {run}")
    except Bad as exc:
        print(f"gpu_plan {args.command}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
