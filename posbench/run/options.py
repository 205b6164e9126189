"""What the user asked of a run (``RunOptions``, built by ``bench.py run`` from its flags) and the
run folder it names (``run_folder``).

The options travel whole from the CLI through planning (``posbench.run.schedule``), a local run
(``posbench.run.runner``), a dry run (``posbench.run.dry_run``) and a launched sweep
(``posbench.run.slurm``); each reads the fields it needs. The suite itself, resolved from
``--suite``, ``--profile`` and ``--set``, travels beside them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from posbench.run.ranks import broadcast
from posbench.run.suite import Suite, check_name


@dataclass(frozen=True)
class RunOptions:
    """How a suite runs: what ``bench.py run``'s flags say (the CLI builds it)."""

    device: str  # "cpu" or "cuda"
    results: Path  # the results root: the run folder is <results>/<suite>/<run id>
    run_id: str | None = None  # a run folder by name (default: ``default_run_id``)
    fresh: bool = False  # a new folder: the run id gets a time suffix
    retry_failed: bool = False  # re-run (case, round)s whose latest row is error or timeout
    methods: Sequence[str] | None = None  # run only these (one the suite lacks joins the run)
    methods_dirs: Sequence[str] = ()  # --methods-dir folders, handed to every worker
    # (row, its number among the rows workers run (0: set aside unavailable, no worker), how many
    # workers run) per row written
    on_row: Callable[[dict, int, int], None] | None = None
    on_start: Callable[..., None] | None = None  # (plan, run folder) once planned, before anything slow
    progress: bool = True  # a progress bar on a terminal
    shard: tuple[int, int] | None = None  # (i, n): case k of the suite when k % n == i
    in_process: bool = False  # bench.py under torchrun: cases run on the joined ranks (``ranks``)
    gpus: Sequence[str] | None = None  # the local pool: a unit per GPU (``pool``; --gpus)
    parallel: int = 1  # the local pool on a CPU: units side by side, for untimed tasks (--parallel)
    command: Sequence[str] = ()  # the command line, recorded in run.json (``status`` prints it to re-run)
    unpaired: bool = False  # methods joining finished grid points run alone, marked unpaired (--unpaired)
    launcher: str | None = None  # "slurm" or "local": a job array through submitit (``slurm``)
    allow_setup: bool = False  # a launched sweep runs the suite's launcher.setup lines (--allow-setup-commands)

    def arguments(self) -> list[str]:
        """The command's arguments, without its ``python bench.py``: what a launched sweep records
        to resubmit (``bench.py status``)."""
        return list(self.command[2:])

    def resolved_dirs(self) -> list[str]:
        """The ``--methods-dir`` folders as absolute paths: what workers, wherever they start, load."""
        return [str(Path(d).resolve()) for d in self.methods_dirs]


def default_run_id(suite: Suite, device: str) -> str:
    return f"{suite.profile}-{device}-{suite.fingerprint()}"


def run_folder(suite: Suite, options: RunOptions) -> tuple[str, Path]:
    """(run id, run folder) of a run: ``--run-id`` (a name, never a path) or the default id, with
    ``--fresh`` a time suffix (rank 0's: the clocks of ranks may straddle a second)."""
    if options.run_id is not None:
        check_name(options.run_id, "--run-id")
    run_id = options.run_id or default_run_id(suite, options.device)
    if options.fresh:
        run_id = f"{run_id}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
        run_id = broadcast(run_id, options.in_process)
    return run_id, Path(options.results) / suite.name / run_id
