"""``bench.py run``'s flags: declared on its parser (``add_run_arguments``), and the checks that
need nothing but the flags themselves (``check_run_flags``, ``set_log``, ``check_results``)."""

from __future__ import annotations

import argparse
import os

from posbench.cli.run_output import EXIT_CASES_FAILED, FAILED_STATUSES
from posbench.cli.sweep_cmds import add_sweep_arguments
from posbench.run.suite import SuiteError


def common_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--methods-dir", action="append", default=[], metavar="DIR", help="also load methods from DIR/*.py (repeatable)"
    )


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    # required, but checked after parsing: a mistyped option (--sute) is said first, as unknown
    p.add_argument("--suite", help="suite name (suites/NAME.yaml) or path to a YAML file (required)")
    p.add_argument("--profile", help="profile of the suite (default: cpu on a CPU, gpu on CUDA)")
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda if available, else cpu")
    p.add_argument(
        "--methods",
        help="comma-separated methods to run: the suite's, or any registered one "
        "(a plugin from --methods-dir too), which joins this run and its table",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting (VALUE is YAML: 3, bfloat16, [64, 128]); grid.AXIS=[...] replaces a grid axis (repeatable)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the cases and stop")
    p.add_argument("--fresh", action="store_true", help="start a new run folder instead of resuming")
    p.add_argument("--run-id", help="run folder name under results/<suite>/ (to resume a --fresh run)")
    p.add_argument("--retry-failed", action="store_true", help="re-run cases whose last row is error or timeout")
    p.add_argument(
        "--unpaired",
        action="store_true",
        help="a method joining a finished timed run runs alone instead of re-measuring its grid points "
        "with every method; its ratios are then marked unpaired",
    )
    p.add_argument("--results", default="results", help="results root (default: results/)")
    p.add_argument(
        "--data",
        metavar="DIR",
        help="a WikiText folder: suites whose task reads a corpus (a corpus setting) use it instead of "
        "their default corpus (sets corpus={kind: wikitext, path: DIR})",
    )
    p.add_argument(
        "--model",
        metavar="hf:DIR",
        help="evaluate a Hugging Face causal LM saved in DIR instead of training one (needs posbench[hf]; "
        "docs/hf-checkpoints.md); sets pretrained=hf:DIR",
    )
    p.add_argument(
        "--shard",
        metavar="I/N",
        help="run shard I of N: case k of the suite's full case list when k %% N == I; shards share "
        "the run id, so their folders merge in 'bench.py report'",
    )
    p.add_argument(
        "--quiet",
        action="store_true",
        help="print only the final summary line (and errors, on stderr, with the count of failed "
        "cases): no progress bar, no per-case lines, no tables (table.md is still written)",
    )
    p.add_argument(
        "--allow-failures",
        action="store_true",
        help=f"exit 0 even when a case ended {'/'.join(FAILED_STATUSES)} (default: exit {EXIT_CASES_FAILED})",
    )
    add_sweep_arguments(p)
    p.add_argument(
        "--log",
        choices=["wandb", "none"],
        help="training curves: TensorBoard event files are written whenever tensorboard is installed; "
        "wandb adds a W&B run per case (needs wandb; WANDB_MODE=offline keeps it local), none "
        "writes no curves",
    )
    common_arguments(p)


def check_run_flags(args) -> list[str] | None:
    """The --methods list (None: the suite's), after refusing flags that contradict or say nothing."""
    if args.suite is None:
        raise SuiteError("--suite is required; allowed: a suite name (bench.py list shows them) or a path to a YAML file")
    if args.fresh and args.retry_failed:
        raise SuiteError(
            "--fresh and --retry-failed contradict each other: --fresh starts a new run folder, which "
            "has no failed cases to retry; allowed: one of them"
        )
    if args.methods is None:
        return None
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not methods:
        raise SuiteError(
            f"--methods: {args.methods!r} names no method; allowed: comma-separated method names "
            "(see: bench.py list), or leave --methods out for the suite's methods"
        )
    return methods


def set_log(choice: str | None) -> None:
    """--log: the workers read ``POSBENCH_LOG`` (``posbench.engine.tracking``); wandb must import."""
    import importlib.util

    from posbench.engine import tracking

    if choice is None:  # POSBENCH_LOG from the environment: refused up front as --log is
        try:
            tracking.check_request()
        except ValueError as exc:
            raise SuiteError(str(exc)) from None
        return
    if choice == "wandb" and importlib.util.find_spec("wandb") is None:
        raise SuiteError(
            "--log wandb: the wandb package is not installed (pip install wandb); allowed: leave --log "
            "out (TensorBoard event files are written whenever tensorboard is installed), or --log none"
        )
    os.environ[tracking.LOG_ENV] = choice


def check_results(results: str) -> None:
    """--results where TensorBoard cannot write (a path that is not UTF-8): one line, up front."""
    from posbench.engine import tracking

    try:
        tracking.check_path(results, "--results")
    except ValueError as exc:
        raise SuiteError(str(exc)) from None
