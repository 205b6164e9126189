"""``bench.py run`` (the default command): the suite and options its flags ask for
(``posbench.cli.run_request``), then a dry run, a launched sweep or a run, and what each prints."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import signal
import sys
from pathlib import Path

from posbench.cli.run_output import case_line, failed_exit, group_line, print_tables, start_line
from posbench.cli.run_request import run_request
from posbench.cli.sweep_cmds import launch_sweep
from posbench.run.options import RunOptions
from posbench.run.suite import Suite


def cmd_run(args) -> int:
    suite, options = run_request(args)
    if args.dry_run:
        return print_dry_run(suite, options)
    if options.launcher:
        return launch_sweep(args, suite, options)
    return run_and_report(args, suite, options)


def print_dry_run(suite: Suite, options: RunOptions) -> int:
    """``--dry-run``: what the run would do (``posbench.run.dry_run``), a line per case; rank 0 alone prints."""
    from posbench.run.dry_run import dry_run

    if os.environ.get("RANK", "0") != "0":
        return 0
    dry = dry_run(suite, options)
    suite = dry.suite
    shown = f"{dry.run_id}-<date>-<time> (new, --fresh)" if options.fresh else dry.run_id
    print(f"suite {suite.name} ({suite.task_name}), profile {suite.profile}, device {options.device}, run {shown}")
    print(f"settings: {json.dumps(suite.settings.model_dump())}")
    for case in dry.todo:  # what the task knows cannot run here, said as the run will (no worker asked)
        reason = dry.unavailable(case)
        print(f"  unavailable {case.id}: {reason}" if reason else f"  run   {case.id} ({dry.why.get(case.id, 'new')})")
    running = {c.id for c in dry.todo}
    for cid, row in dry.done.items():
        if cid not in running:
            print(f"  done  {cid} ({row['status']})")
    if dry.run_dir is None:
        print(f"{len(dry.todo)} case(s) to run in a new run folder under {Path(options.results) / suite.name}/ (--fresh)")
    else:
        print(f"{len(dry.todo)} case(s) to run, {len(dry.done)} already in {dry.run_dir}")
    if dry.todo:  # from the run folder's recorded case times (``dry_run.reasons_and_time``)
        print(
            "time: no estimate (no case here has a recorded time yet; --dry-run after a first run estimates it)"
            if dry.estimate_s is None
            else f"time: about {f'{dry.estimate_s:.0f} s' if dry.estimate_s < 120 else f'{dry.estimate_s / 60:.0f} min'} "
            "from this run folder's recorded case times"
            + (f", not counting {dry.unknown} run(s) with no recorded time" if dry.unknown else "")
        )
    return 0


class RowPrinter:
    """A line per row as a run writes it (``RunOptions.on_row``), numbered among the rows workers
    run (``[k/n]``: every number once, ending at n); ``--quiet``: none. A method's cases set aside
    as unavailable before any worker carry no number and are said once per method (30 Triton cases
    on a CPU), the others counted in ``hidden``. ``start`` is the first line (``on_start``)."""

    def __init__(self, metrics, quiet: bool):
        self.metrics, self.quiet = metrics, quiet
        self.unavailable_shown: set[str] = set()  # methods whose first unavailable case was printed
        self.hidden = 0

    def start(self, plan, run_dir) -> None:
        if not self.quiet:
            print(start_line(plan, run_dir), flush=True)

    def __call__(self, row: dict, i: int, n: int) -> None:
        from tqdm import tqdm

        if self.quiet:  # --quiet: failures are counted in one line at the end (failed_exit)
            return
        if i == 0 and row["method"] in self.unavailable_shown:
            self.hidden += 1
            return
        if i == 0:
            self.unavailable_shown.add(row["method"])
        number = f"[{i}/{n}]" if i else "[-]"
        tqdm.write(f"{number} " + case_line(row, self.metrics), file=sys.stdout)
        group = group_line(row)
        if group:
            tqdm.write(group, file=sys.stdout)


def run_and_report(args, suite: Suite, options: RunOptions) -> int:
    """Run the suite here (``posbench.run.runner``), a line per row, then the summary and tables;
    the exit status says whether a case failed (``--allow-failures``: 0)."""
    from posbench.engine import distributed
    from posbench.run.ranks import RanksOutOfStep
    from posbench.run.runner import Interrupted, run_suite

    printer = RowPrinter(suite.metrics, args.quiet)
    finished = False
    try:
        result = run_suite(suite, dataclasses.replace(options, on_row=printer, on_start=printer.start))
        finished = True
    except RanksOutOfStep as exc:
        print(f"RanksOutOfStep: {exc}", file=sys.stderr)
        return 1
    except Interrupted as exc:
        return print_interrupted(exc)
    finally:
        if options.in_process:
            distributed.teardown(sync=finished)
    if os.environ.get("RANK", "0") != "0":
        return 0  # rank 0 alone reports under torchrun
    summary = (
        f"{result.ran} case(s) run, {result.skipped} already done"
        + (f" (rows: {result.cases} case(s) x their rounds)" if result.ran != result.cases else "")  # a row per case and round
        + (f", {result.unavailable} unavailable here" if result.unavailable else "")
        + f"; rows in {result.run_dir}/cases.jsonl"
    )
    if not args.quiet:
        if printer.hidden:
            print(f"({printer.hidden} more unavailable case(s) of the methods above not shown; their rows are in cases.jsonl)")
        print(summary)
    broken: list[str] = []
    if result.rows and suite.metrics:
        table, broken = print_tables(result.run_dir, result.run_id, suite, options.device, show=not args.quiet)
        summary += f", tables in {table}"
    if args.quiet:  # the one line --quiet keeps: last, after the tables were written
        print(summary)
    return failed_exit(result.rows, args.allow_failures, broken)


def print_interrupted(exc) -> int:
    """Ctrl-C or SIGTERM ended the run (``runner.Interrupted``): what was saved, and the command
    that resumes it; the exit status is 128 + the signal's number."""
    argv = [a for a in sys.argv[1:] if a != "--fresh"]
    if "--run-id" not in argv:
        argv += ["--run-id", exc.run_id]
    how = "terminated (SIGTERM)" if exc.signum == signal.SIGTERM else "interrupted"
    print(
        f"\n{how}: {exc.done} of {exc.total} cases finished and saved in {exc.run_dir}/cases.jsonl\n"
        f"resume with: python bench.py {shlex.join(argv)}",
        file=sys.stderr,
    )
    return 128 + exc.signum
