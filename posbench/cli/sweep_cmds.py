"""bench.py's sweep flags and the ``status`` command: a sweep spread over GPUs or Slurm nodes.

``run``'s ``--gpus`` / ``--parallel`` (the local pool, ``posbench.run.pool``) and ``--launcher
slurm|local`` (a job array through submitit, ``posbench.run.slurm``) are added to its parser
here; ``bench.py status RUN`` prints where a launched sweep stands, per unit, and the command
that resubmits what failed, or, for a run folder ``bench.py run`` wrote, its cases per status.
Both, and a followed sweep, exit ``EXIT_CASES_FAILED`` when a case failed (``--allow-failures``: 0).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from posbench.cli.run_output import EXIT_CASES_FAILED, FAILED_STATUSES, failed_exit, short_message
from posbench.core.outcome import PosbenchError
from posbench.run.pool import PoolError
from posbench.run.sweep_state import UnitLine, units_of
from posbench.store.launched_sweep import RECORD_FILE
from posbench.store.run_rows import case_rows

SWEEP_EXAMPLES = [
    ("python bench.py --suite {suite} --gpus all", "a unit (a grid point's methods) per GPU"),
    ("python bench.py --suite {train_suite} --parallel 2", "two training cases at once on a CPU"),
    ("python bench.py --suite {suite} --launcher slurm --set launcher.partition=dev", "a Slurm job array"),
    ("python bench.py status results/{suite}/RUN_ID", "a sweep's units, or a run's cases per status"),
]


class NotARunFolder(PosbenchError):
    """``bench.py status`` given a folder that is missing or holds no run: a plain line starting
    ``status:`` (the command's input is wrong, not a pool flag)."""

    kind = "status"


def add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--gpus",
        metavar="IDS",
        help="run units side by side, one per GPU: comma-separated CUDA device ids or 'all' (a unit is a "
        "grid point with every method for timed tasks, a case otherwise)",
    )
    p.add_argument(
        "--parallel", type=int, default=1, metavar="N", help="on a CPU: N cases at once (tasks that train; timed tasks refuse it)"
    )
    p.add_argument(
        "--launcher",
        choices=["slurm", "local"],
        help="submit the sweep through submitit: one job array, a task per unit (pip install "
        "posbench[slurm]); Slurm parameters in the suite's launcher: block or --set launcher.KEY=VALUE",
    )
    p.add_argument("--detach", action="store_true", help="with --launcher: submit and return (follow with bench.py status RUN)")
    p.add_argument(
        "--allow-setup-commands",
        action="store_true",
        help="with --launcher: run the shell lines of the suite's launcher.setup before each task "
        "(without it a suite that has them is refused)",
    )


def pool_options(args, device: str) -> dict:
    """``RunOptions`` fields of the pool flags (``gpus``, ``parallel``), refused in one line
    where they cannot apply."""
    from posbench.run import pool

    check_launcher_flags(args)
    if args.parallel != 1 and args.gpus is not None:
        raise PoolError("--gpus and --parallel both say how many units run at once; allowed: one of them")
    if args.gpus is not None:
        if device != "cuda":
            raise PoolError(f"--gpus: the run is on {device}; allowed: --gpus with --device cuda, or --parallel N on a CPU")
        return {"gpus": tuple(pool.parse_gpus(args.gpus))}
    if args.parallel != 1 and device != "cpu":
        raise PoolError("--parallel: on CUDA units run one per GPU; allowed: --gpus IDS (or all)")
    return {"parallel": args.parallel}


def check_launcher_flags(args) -> None:
    from posbench.run.pool import MAX_PARALLEL

    if not 1 <= args.parallel <= MAX_PARALLEL:  # before anything is sized by it
        shown = str(args.parallel) if len(str(args.parallel)) <= 24 else str(args.parallel)[:24] + "..."
        raise PoolError(f"--parallel {shown}: allowed: a whole number from 1 to {MAX_PARALLEL}")
    if getattr(args, "allow_setup_commands", False) and not args.launcher:
        raise PoolError(
            "--allow-setup-commands: only a launched sweep runs the suite's launcher.setup; allowed: with --launcher slurm|local"
        )
    if args.detach and not args.launcher:
        raise PoolError("--detach: only a launched sweep can be left running; allowed: with --launcher slurm|local")
    if args.launcher and (args.gpus is not None or args.parallel != 1):
        raise PoolError(
            "--launcher runs a unit per array task; --gpus / --parallel are for a run on this machine; allowed: one of them"
        )


def resubmit_command(command: list[str], run_id: str) -> str:
    """The recorded command with ``--run-id RUN --retry-failed`` (``--fresh``/``--detach`` dropped)."""
    argv, skip = [], False
    for a in command:
        if skip:
            skip = False
            continue
        if a == "--run-id":
            skip = True
            continue
        if a in ("--fresh", "--detach", "--retry-failed") or a.startswith("--run-id="):
            continue
        argv.append(a)
    return "python bench.py " + shlex.join(argv + ["--run-id", run_id, "--retry-failed"])


def launch_sweep(args, suite, options) -> int:
    """``run --launcher slurm|local``: submit (``posbench.run.slurm``), then follow unless ``--detach``."""
    from tqdm import tqdm

    from posbench.run import slurm

    out = slurm.submit(suite, options)
    jobs = sorted({out.record["units"][k]["job_id"].split("_")[0] for k in out.units})
    submitted = (
        f"submitted {len(out.units) + len(out.waiting)} unit(s) of {suite.name} ({options.launcher}"
        f"{', job ' + ', '.join(jobs) if jobs and options.launcher == 'slurm' else ''}) in {out.run_dir}"
        + (f"; {len(out.busy)} unit(s) still queued or running from before, left alone" if out.busy else "")
    )
    if args.detach or not (out.units or out.waiting) or not args.quiet:
        print(submitted)
    if args.detach or not (out.units or out.waiting):
        if out.waiting:
            print(
                f"{len(out.waiting)} unit(s) wait for a free slot (launcher.array_parallelism) and start only "
                "while a submitter follows the sweep: run the same command again without --detach to start them"
            )
        print(f"follow with: python bench.py status {out.run_dir}")
        return 0
    total = sum(len(out.record["units"][k]["todo"]) for k in out.units) + sum(len(s["todo"]) for s in out.waiting)
    from posbench.cli.run_output import case_line

    bar = tqdm(total=total, desc=suite.name, unit="case", file=sys.stderr, disable=args.quiet or not sys.stderr.isatty())
    count = [0]

    def on_row(row):
        count[0] += 1
        bar.update(1)
        if not args.quiet:  # --quiet: failures are counted in one line at the end (failed_exit)
            tqdm.write(f"[{count[0]}/{total}] " + case_line(row, suite.metrics), file=sys.stdout)

    try:
        states, sweep = slurm.follow(out, on_row, poll_s=slurm.POLL_S[options.launcher])
    except KeyboardInterrupt:
        bar.close()
        print(f"\nstopped following; the tasks keep running: python bench.py status {out.run_dir}", file=sys.stderr)
        return 130
    bar.close()
    broken: list[str] = []
    if suite.metrics:  # the tables first: a failed sweep's exit status comes after them, as a run's does
        from posbench.cli.run_output import print_tables

        _table, broken = print_tables(out.run_dir, out.run_id, suite, options.device, show=not args.quiet)
    # The sweep as follow last read it: what ``bench.py status`` would print, not read back again.
    rows = list(case_rows(sweep.rows.values()).values())
    units = units_of(sweep, states)
    return print_units(out.run_dir, sweep.record, units, rows, args.allow_failures, args.quiet, broken)


def print_status(run_dir: Path, allow_failures: bool = False, quiet: bool = False) -> int:
    """Per unit of a launched sweep: queued / running / done / failed (``print_units``); a run
    folder that was not launched: ``print_run_status``."""
    from posbench.run import sweep_state as state

    found = state.status(run_dir)
    if found is None:
        return print_run_status(run_dir, allow_failures, quiet)
    record, units = found
    return print_units(run_dir, record, units, _case_rows(run_dir), allow_failures, quiet)


def print_units(
    run_dir: Path, record: dict, units: list[UnitLine], rows: list[dict], allow_failures: bool, quiet: bool, broken=()
) -> int:
    """Per unit of a launched sweep (``sweep_state.units_of``): queued / running / done / failed,
    and the command that resubmits what failed (``quiet``: the one summary line).
    ``EXIT_CASES_FAILED`` when a case (of ``rows``, one per case) or a unit failed, or a table
    says no method learnt (``broken``: ``print_tables``'s), unless ``allow_failures``."""
    lines, counts = [], {"queued": 0, "running": 0, "done": 0, "failed": 0}
    for key, unit, s, word, n in units:
        counts[word] += 1
        how = (
            ""
            if word == "done"
            else f"  {s.state}" + (f" (exit {s.exit_code})" if s.exit_code else "") + (f" {s.reason}" if s.reason else "")
        )
        lines.append(f"  {key:<28} {word:<8} {n}/{len(unit['todo'])} cases  job {unit['job_id'] or '-'}{how}")
    print(f"{run_dir} ({record['launcher']}, {len(lines)} units): " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    if not quiet:
        print("\n".join(lines))
    if counts["failed"]:
        print(f"resubmit what failed: {resubmit_command(record.get('command') or [], run_dir.name)}")
    if allow_failures:  # what failed is in the lines above: no note to add
        return 0
    code = failed_exit(rows, False, list(broken))
    if code == 0 and counts["failed"]:  # a unit that ended without rows
        print(f"{counts['failed']} unit(s) failed; exit status {EXIT_CASES_FAILED} (--allow-failures gives 0)", file=sys.stderr)
        return EXIT_CASES_FAILED
    return code


def _case_rows(run_dir: Path) -> list[dict]:
    """One row per case of the run folder (its rounds merged), as reports read them."""
    from posbench.store.run_rows import case_rows, read_usable_run_rows

    return list(case_rows(read_usable_run_rows(run_dir)).values())


STATUS_ORDER = ("ok", "unavailable") + FAILED_STATUSES


def print_run_status(run_dir: Path, allow_failures: bool = False, quiet: bool = False) -> int:
    """A run folder ``bench.py run`` wrote (no launched sweep): while a run holds it, ``running, k
    of n, ETA`` (``posbench.run.progress``); its cases per status, one line per failed case and the
    command that re-runs those ``--retry-failed`` takes (``quiet``: the one summary line)."""
    from posbench.run.progress import live_progress
    from posbench.store.meta import read_run_meta, run_command
    from posbench.store.run_rows import CASES_FILE

    live = live_progress(run_dir)  # the run's lock is held: it runs now
    if live is not None and not (run_dir / CASES_FILE).is_file():
        print(f"{run_dir} (run folder): {live.text()}; no case finished yet")
        return 0
    if not (run_dir / CASES_FILE).is_file():
        raise NotARunFolder(
            f"{run_dir}: no {CASES_FILE} and no {RECORD_FILE}; allowed: a run folder "
            "(results/<suite>/<run-id>) that bench.py run or a launched sweep wrote"
        )
    rows = _case_rows(run_dir)
    meta = read_run_meta(run_dir)
    found = [r["status"] for r in rows]
    order = list(STATUS_ORDER) + sorted(set(found) - set(STATUS_ORDER))
    what = (
        ", ".join(f"{k} {v}" for k, v in (("suite", meta.suite), ("profile", meta.profile), ("device", meta.device)) if v)
        if meta
        else "no run.json"
    )
    state = f"{live.text()}; " if live is not None else ""
    print(
        f"{run_dir} (run folder, {what}): {state}{len(rows)} case(s): "
        + ", ".join(f"{found.count(s)} {s}" for s in order if s in found)
    )
    failed = [r for r in rows if r["status"] in FAILED_STATUSES]
    if not quiet:
        for r in failed:
            print(f"  {r['case_id']:<28} {r['status']:<9} {short_message(r.get('message') or '')}")
    command = run_command(run_dir)
    if meta is not None and command[:2] == ["python", "bench.py"] and any(r["status"] in ("error", "timeout") for r in failed):
        # the run's own command (its --set, --methods, --data...), resuming this folder
        print(f"re-run the error and timeout cases: {resubmit_command(command[2:], run_dir.name)}")
    elif meta is not None and any(r["status"] in ("error", "timeout") for r in failed):  # a run.json without its command
        argv = ["--suite", meta.suite] + [
            a for flag, value in (("--profile", meta.profile), ("--device", meta.device)) if value for a in (flag, value)
        ]
        if run_dir.parent.parent != Path("results"):
            argv += ["--results", str(run_dir.parent.parent)]
        argv += ["--run-id", run_dir.name]
        print(f"re-run the error and timeout cases: python bench.py {shlex.join(argv + ['--retry-failed'])}")
    return 0 if allow_failures else failed_exit(rows, False)


def cmd_status(args) -> int:
    """One run folder; or a folder of them (``results/<suite>``, as ``report`` takes): each run's
    summary line, the worst exit status."""
    from posbench.store.run_rows import CASES_FILE

    folder = Path(args.run)
    if not folder.exists():
        raise NotARunFolder(
            f"{folder}: no such folder; allowed: a run folder (results/<suite>/<run-id>) or a folder of them (results/<suite>)"
        )
    runs = sorted(
        p for p in (folder.iterdir() if folder.is_dir() else ()) if (p / CASES_FILE).is_file() or (p / RECORD_FILE).is_file()
    )
    if (folder / CASES_FILE).exists() or (folder / RECORD_FILE).exists() or not runs:
        return print_status(folder, args.allow_failures)
    return max(print_status(run, args.allow_failures, quiet=True) for run in runs)


def add_status_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="a run folder (results/<suite>/<run-id>): a launched sweep's units, else its cases per status")
    p.add_argument(
        "--allow-failures", action="store_true", help=f"exit 0 even when a case failed (default: exit {EXIT_CASES_FAILED})"
    )
