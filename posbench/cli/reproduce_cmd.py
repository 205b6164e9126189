"""``bench.py reproduce results/published/<suite>/<run-id>``: re-run a published run's recorded
command into a fresh folder and compare the new run with the published one by ``compare``'s rules
(quality within the seed intervals, speed within the noise, a different machine said plainly;
differently-set runs refused), exiting as ``compare`` does: 0 reproduced, 1 a regression or a
missing case, 2 bad input. ``--dry-run`` prints the command and the folder and runs nothing.

The command is run.json's ``command`` (what the runner recorded), less the options that say where
and how to store (``--results``, ``--fresh``), else one rebuilt from run.json's settings and grid.
A run whose methods came from outside the repository is refused: those files are not here.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

REPRODUCE_EPILOG = """examples:
  bench.py reproduce results/published/dependency/cpu-cpu-d508c13e
  bench.py reproduce results/published/ruler/cpu-cpu-0a1b2c3d --dry-run
  bench.py reproduce results/published/SUITE/RUN-ID --results /tmp/again

re-runs the recorded command into a fresh folder (default results/reproduce-<time>/), then
compares as `bench.py compare PUBLISHED NEW` does; exit code as compare's: 0 reproduced within the
intervals and the noise, 1 a regression or a case missing, 2 bad input (no run there, methods from
outside the repository, a different GPU model, different settings, a rerun that could not start)
"""
DROPPED = {"--results": True, "--fresh": False}  # option -> whether it takes a value


def add_reproduce_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``reproduce PUBLISHED [--results DIR] [--dry-run] [--threshold T] [--markdown FILE]
    [--allow-other-hardware]``."""
    p = subparsers.add_parser(
        "reproduce",
        help="re-run a published run and compare it with what was published",
        description="Re-run a published run's recorded command into a fresh folder and compare the two runs.",
        epilog=REPRODUCE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("published", metavar="PUBLISHED", help="a published run folder (results/published/<suite>/<run-id>)")
    p.add_argument(
        "--results", metavar="DIR", default=None, help="where the rerun writes (default: a new results/reproduce-<time>/)"
    )
    p.add_argument("--dry-run", action="store_true", help="print the command and where it would write; run nothing")
    p.add_argument("--threshold", type=float, default=0.05, help="relative change that counts (default 0.05 = 5%%)")
    p.add_argument("--markdown", metavar="FILE", default=None, help="also write the comparison here")
    p.add_argument("--allow-other-hardware", action="store_true", help="compare with a run made on another GPU model (a warning)")
    p.set_defaults(func=main_reproduce)
    return p


def rerun_arguments(command: list[str], results: str) -> list[str]:
    """``bench.py``'s arguments for the rerun: ``command`` (``python bench.py ARGS``, or
    ``posbench ARGS``) less what stores it elsewhere (``--results``, ``--fresh``), writing into
    ``results``."""
    start = next((i + 1 for i, a in enumerate(command) if Path(a).name in ("bench.py", "posbench")), 1)
    out, skip = [], False
    for arg in command[start:]:
        if skip:
            skip = False
        elif arg in DROPPED:
            skip = DROPPED[arg]
        elif not any(arg.startswith(f"{flag}=") for flag in DROPPED):
            out.append(arg)
    return out + ["--results", results]


def recorded_argv(run_dir: Path) -> list[str]:
    """The command that made the run: run.json's, else rebuilt from its settings and grid."""
    from posbench.report.results_page import reconstruct_command
    from posbench.store.meta import read_run_meta, run_command

    return run_command(run_dir) or reconstruct_command(read_run_meta(run_dir))


# bench.py's own entry, in a fresh interpreter: the rerun loads its methods and settings as the
# published run's process did, untouched by this one's registry.
BENCH = "import sys; from posbench.cli.app import main; sys.exit(main(sys.argv[1:]))"


def rerun(arguments: list[str]) -> int:
    """Run ``bench.py ARGUMENTS`` in a new process here; its exit code (tests replace this)."""
    import subprocess

    return subprocess.run([sys.executable, "-c", BENCH, *arguments], check=False).returncode


def _bad(text: str) -> int:
    print(f"posbench reproduce: {text}", file=sys.stderr)
    return 2


def main_reproduce(args) -> int:
    """Handler of ``reproduce``: rerun, then compare (exit as compare); bad input one line, exit 2."""
    from posbench import tasks
    from posbench.report.compare import main_compare
    from posbench.store.bounds import RowsError
    from posbench.store.meta import read_run_meta
    from posbench.store.published import outside_methods_dirs

    published = Path(args.published)
    try:
        meta = read_run_meta(published) if published.is_dir() else None
    except RowsError as exc:
        return _bad(str(exc))
    if meta is None:
        return _bad(f"{published}: no published run (run.json); allowed: a folder results/published/<suite>/<run-id>")
    command = recorded_argv(published)
    outside = outside_methods_dirs(command)
    if outside:
        return _bad(
            f"{published}: its methods came from outside the repository (--methods-dir {outside[0]}); "
            "allowed: runs whose methods are in the repository (run its command yourself with those files)"
        )
    results = args.results or f"results/reproduce-{time.strftime('%Y%m%d-%H%M%S')}"
    arguments = rerun_arguments(command, results)
    print(f"reproduce: python bench.py {shlex.join(arguments)}")
    if args.dry_run:
        print(f"then: python bench.py compare {shlex.quote(published.as_posix())} {shlex.quote(results)}/{meta.suite}/...")
        return 0
    code = rerun(arguments)
    new = Path(results) / meta.suite
    if code == 2 or not new.is_dir():
        return _bad(f"the rerun ended with exit code {code} and wrote no run under {new}")
    compare = argparse.Namespace(
        base=str(published),
        new=str(new),
        threshold=args.threshold,
        markdown=args.markdown,
        allow_other_hardware=args.allow_other_hardware,
        allow_different_settings=False,
    )
    return main_compare(compare, find_task=tasks.find)
