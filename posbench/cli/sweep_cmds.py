"""bench.py's sweep flags and the ``status`` command: a sweep spread over GPUs or Slurm nodes.

``run``'s ``--gpus`` / ``--parallel`` (the local pool, ``posbench.run.pool``) and ``--launcher
slurm|local`` (a job array through submitit, ``posbench.run.slurm``) are added to its parser
here; ``bench.py status RUN`` prints where a launched sweep stands, per unit, and the command
that resubmits what failed.
"""
from __future__ import annotations

import argparse

from posbench.run.pool import PoolError

SWEEP_EXAMPLES = [
    ("python bench.py --suite {suite} --gpus all", "a unit (a grid point's methods) per GPU"),
    ("python bench.py --suite {train_suite} --parallel 2", "two training cases at once on a CPU"),
    ("python bench.py --suite {suite} --launcher slurm --set launcher.partition=dev", "a Slurm job array"),
    ("python bench.py status results/{suite}/RUN_ID", "queued/running/done/failed per unit"),
]


def add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpus", metavar="IDS",
                   help="run units side by side, one per GPU: comma-separated CUDA device ids or 'all' (a unit is a "
                        "grid point with every method for timed tasks, a case otherwise)")
    p.add_argument("--parallel", type=int, default=1, metavar="N",
                   help="on a CPU: N cases at once (tasks that train; timed tasks refuse it)")
    p.add_argument("--launcher", choices=["slurm", "local"],
                   help="submit the sweep through submitit: one job array, a task per unit (pip install "
                        "posbench[slurm]); Slurm parameters in the suite's launcher: block or --set launcher.KEY=VALUE")
    p.add_argument("--detach", action="store_true",
                   help="with --launcher: submit and return (follow with bench.py status RUN)")


def pool_options(args, device: str) -> dict:
    """``RunOptions`` fields of the pool flags (``gpus``, ``parallel``), refused in one line
    where they cannot apply."""
    from posbench.run import pool

    check_launcher_flags(args)
    if args.parallel != 1 and args.gpus is not None:
        raise PoolError("--gpus and --parallel both say how many units run at once; allowed: one of them")
    if args.gpus is not None:
        if device != "cuda":
            raise PoolError(f"--gpus: the run is on {device}; allowed: --gpus with --device cuda, or --parallel N "
                            "on a CPU")
        return {"gpus": tuple(pool.parse_gpus(args.gpus))}
    if args.parallel != 1 and device != "cpu":
        raise PoolError("--parallel: on CUDA units run one per GPU; allowed: --gpus IDS (or all)")
    return {"parallel": args.parallel}


def check_launcher_flags(args) -> None:
    if args.detach and not args.launcher:
        raise PoolError("--detach: only a launched sweep can be left running; allowed: with --launcher slurm|local")
    if args.launcher and (args.gpus is not None or args.parallel != 1):
        raise PoolError("--launcher runs a unit per array task; --gpus / --parallel are for a run on this machine; "
                        "allowed: one of them")

