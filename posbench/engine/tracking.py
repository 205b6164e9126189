"""Training curves to watch while a case runs: TensorBoard event files, and W&B on request.

A ``Tracker`` hands scalars ``(tag, value, step)`` to its writers, in ``<run folder>/cases/<name>/``
and only on rank 0; without a run folder nothing is written. Tags, folders and set-up:
docs/watching-training.md.
"""
from __future__ import annotations

import importlib.util
import math
import os
import time
from pathlib import Path
from typing import Any, Optional, Protocol

from posbench.core.files import own_folder

LOG_ENV = "POSBENCH_LOG"  # comma-separated extra writers for the workers: "wandb"; "none" turns all off
EXTRA_WRITERS = ("wandb",)
FLUSH_S = 10.0  # seconds between the TensorBoard writer's flushes while a case runs
TRACK_HINT = "pip install 'posbench[track]'"


class Writer(Protocol):
    def scalar(self, tag: str, value: float, step: int) -> None: ...

    def close(self) -> None: ...


def tensorboard_version() -> Optional[str]:
    """The installed tensorboard's version, or None when it cannot be imported."""
    if importlib.util.find_spec("tensorboard") is None:
        return None
    try:
        import tensorboard
    except Exception:  # a broken install writes no curves; env.json says so
        return None
    return str(getattr(tensorboard, "__version__", "installed"))


def status() -> str:
    """One line for env.json: which writers a case gets here."""
    try:
        extra = requested()
    except ValueError as exc:
        return f"off: {exc}"
    if "none" in extra:
        return f"off: {LOG_ENV}=none"
    tb = tensorboard_version()
    writers = [f"tensorboard {tb} (event files in <run>/cases/<case>/)"] if tb else []
    if "wandb" in extra:
        writers.append(f"wandb {_wandb_version()} (mode {os.environ.get('WANDB_MODE', 'online')})")
    if not writers:
        return f"absent: no training curves (tensorboard is not installed; {TRACK_HINT})"
    return ", ".join(writers)


def _wandb_version() -> str:
    try:
        import wandb
    except Exception:
        return "not importable"
    return str(getattr(wandb, "__version__", "installed"))


def requested(value: Optional[str] = None) -> list[str]:
    """The writers ``POSBENCH_LOG`` (or ``value``) asks for beyond TensorBoard; a name it does not
    know is a one-line ValueError."""
    raw = os.environ.get(LOG_ENV, "") if value is None else value
    names = [n.strip() for n in raw.split(",") if n.strip()]
    bad = [n for n in names if n not in (*EXTRA_WRITERS, "none")]
    if bad:
        raise ValueError(f"{LOG_ENV}: unknown writer {bad[0]!r}; allowed: {', '.join(EXTRA_WRITERS)}, none")
    return names


def check_request() -> None:
    """``POSBENCH_LOG`` as ``--log`` is checked, before any case runs: an unknown writer, or wandb
    where it does not import, is a one-line ValueError (not an error row per case)."""
    if "wandb" in requested() and importlib.util.find_spec("wandb") is None:
        raise ValueError(f"{LOG_ENV}=wandb: the wandb package is not installed (pip install wandb); allowed: "
                         f"unset {LOG_ENV} (TensorBoard event files are written whenever tensorboard is installed), "
                         "or none")


def check_path(path: str | os.PathLike, what: str) -> None:
    """A one-line ValueError when event files would go under ``path`` and it is not UTF-8:
    TensorBoard's writer cannot name such a folder (it failed every training case)."""
    try:
        os.fsencode(os.path.abspath(path)).decode("utf-8")
        return
    except UnicodeDecodeError:
        pass
    if "none" in requested() or tensorboard_version() is None:
        return
    raise ValueError(f"{what} {os.fsdecode(os.path.abspath(path))!a}: the path is not UTF-8, and TensorBoard's "
                     f"writer cannot write event files there; allowed: a UTF-8 path, or --log none")


def case_folder(out_dir: str | os.PathLike | None, name: str) -> Optional[Path]:
    """``<run folder>/cases/<name>/`` (a case id's ``/`` as ``__``), or None without a run folder."""
    if not out_dir:
        return None
    return Path(out_dir) / "cases" / name.replace("/", "__")


class TensorBoardWriter:
    """Scalars as TensorBoard events (``simple_value``) in ``folder``."""

    # tensorboard's own EventFileWriter, not torch's SummaryWriter, which would pull in torch's
    # copy of the protobufs for nothing; it flushes every FLUSH_S from its own thread.

    def __init__(self, folder: Path):
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._event, self._summary = event_pb2.Event, summary_pb2.Summary
        self._file = EventFileWriter(str(folder), flush_secs=FLUSH_S)
        self.path = Path(self._file.get_logdir())

    def scalar(self, tag: str, value: float, step: int) -> None:
        summary = self._summary(value=[self._summary.Value(tag=tag, simple_value=float(value))])
        self._file.add_event(self._event(wall_time=time.time(), step=int(step), summary=summary))

    def close(self) -> None:
        self._file.close()  # flushes


class WandbWriter:
    """One W&B run in ``folder``/wandb; every scalar is logged with its own ``step`` field."""

    # Its own step (define_metric): W&B's step may never go back, and the efficiency task logs
    # evaluation windows 0..n, then training windows 0..n.

    def __init__(self, folder: Path, name: str, config: dict):
        import wandb

        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "posbench"), name=name, dir=str(folder),
                              config=config, reinit="finish_previous")
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")

    def scalar(self, tag: str, value: float, step: int) -> None:
        self.run.log({tag: float(value), "step": int(step)})

    def close(self) -> None:
        self.run.finish()


class Tracker:
    """The writers of one case (none: every call is a no-op). A context manager: closing flushes."""

    def __init__(self, writers: list[Writer] | None = None, folder: Optional[Path] = None):
        self.writers = list(writers or [])
        self.folder = folder

    @property
    def active(self) -> bool:
        return bool(self.writers)

    def scalar(self, tag: str, value: Optional[float], step: int) -> None:
        """Log ``value`` at ``step``; a None or non-finite value is left out (a curve with a gap)."""
        if value is None or not math.isfinite(float(value)):
            return
        for w in self.writers:
            w.scalar(tag, float(value), step)

    def scalars(self, values: dict[str, Optional[float]], step: int) -> None:
        for tag, value in values.items():
            self.scalar(tag, value, step)

    def window(self, phase: str, step: int, tokens_per_s: float, loss: Optional[float] = None) -> None:
        """A timed task's measured window: ``<phase>/tokens_per_s`` (and ``train/loss``) at ``step``.
        Call it after the window's clock stopped: writing is never part of what a window times."""
        self.scalar(f"{phase}/tokens_per_s", tokens_per_s, step)
        if loss is not None:
            self.scalar(f"{phase}/loss", loss, step)

    def close(self) -> None:
        writers, self.writers = self.writers, []
        for w in writers:
            w.close()

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False


def open_tracker(folder: Optional[Path], name: str = "", config: Optional[dict[str, Any]] = None) -> Tracker:
    """The tracker of one case: TensorBoard when importable, W&B when ``POSBENCH_LOG`` asks for it,
    nothing without a folder, off rank 0, or with ``POSBENCH_LOG=none``."""
    from posbench.engine import distributed

    extra = requested()
    if folder is None or not distributed.is_main() or "none" in extra:
        return Tracker()
    check_path(folder, "training curves:")
    own_folder(folder.parent)  # cases/ and cases/<name>/: real folders, never a link out of the run
    own_folder(folder)
    writers: list[Writer] = []
    if tensorboard_version() is not None:
        writers.append(TensorBoardWriter(folder))
    if "wandb" in extra:
        writers.append(WandbWriter(folder, name or folder.name, config or {}))
    return Tracker(writers, folder)


def for_case(case, name: Optional[str] = None) -> Tracker:
    """``open_tracker`` for ``case`` (``posbench.core.case.Case``) in its run folder; ``name``:
    the trained model's name (default the case id). W&B gets the case's settings as its config."""
    name = name or case.id
    config = {"method": case.method, "task": case.task, "suite": case.suite, "run_id": case.run_id,
              "params": case.params.model_dump(), "settings": case.settings.model_dump()}
    return open_tracker(case_folder(getattr(case, "out_dir", ""), name), name, config)
