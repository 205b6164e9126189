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
from typing import Any, Protocol

from posbench.core.files import open_nofollow, own_folder

LOG_ENV = "POSBENCH_LOG"  # comma-separated extra writers for the workers: "wandb"; "none" turns all off
EXTRA_WRITERS = ("wandb",)
EVENT_FILE = "events.out.tfevents.posbench"  # a case's one event file ("tfevents" in the name: TensorBoard reads it)
TRACK_HINT = "pip install 'posbench[track]'"


class Writer(Protocol):
    def scalar(self, tag: str, value: float, step: int) -> None: ...

    def close(self) -> None: ...


def tensorboard_version() -> str | None:
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


def requested(value: str | None = None) -> list[str]:
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
        raise ValueError(
            f"{LOG_ENV}=wandb: the wandb package is not installed (pip install wandb); allowed: "
            f"unset {LOG_ENV} (TensorBoard event files are written whenever tensorboard is installed), "
            "or none"
        )


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
    raise ValueError(
        f"{what} {os.fsdecode(os.path.abspath(path))!a}: the path is not UTF-8, and TensorBoard's "
        f"writer cannot write event files there; allowed: a UTF-8 path, or --log none"
    )


def case_folder(out_dir: str | os.PathLike | None, name: str) -> Path | None:
    """``<run folder>/cases/<name>/`` (a case id's ``/`` as ``__``), or None without a run folder."""
    if not out_dir:
        return None
    return Path(out_dir) / "cases" / name.replace("/", "__")


class TensorBoardWriter:
    """Scalars as TensorBoard events (``simple_value``) appended to the case's one event file
    (``EVENT_FILE``), each event written whole as it is logged."""

    # Every process of a case (a round of the efficiency task, a retried case) appends to the same
    # file, so TensorBoard shows one curve per tag, not one file per process. A process's first
    # event is a SessionLog START at its first step: TensorBoard's reader then drops what an
    # earlier process logged from that step on (a retried case replaces its old curve). One
    # write(2) per record on an O_APPEND descriptor: no writer thread, nothing buffered, and two
    # processes appending at once never interleave inside a record.

    def __init__(self, folder: Path):
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter

        self._event, self._summary, self._session_log = event_pb2.Event, summary_pb2.Summary, event_pb2.SessionLog
        self.path = folder / EVENT_FILE
        self._fd: int | None = open_nofollow(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self._records = RecordWriter(self)
        self._session = False
        if os.fstat(self._fd).st_size == 0:
            self._records.write(self._event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())

    def write(self, data: bytes) -> None:  # RecordWriter's sink: one whole record
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def scalar(self, tag: str, value: float, step: int) -> None:
        if not self._session:
            self._session = True
            start = self._session_log(status=self._session_log.START)
            self._records.write(self._event(wall_time=time.time(), step=int(step), session_log=start).SerializeToString())
        summary = self._summary(value=[self._summary.Value(tag=tag, simple_value=float(value))])
        self._records.write(self._event(wall_time=time.time(), step=int(step), summary=summary).SerializeToString())

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def last_step(folder: Path | None) -> int | None:
    """The largest step of a scalar in ``folder``'s event file (``EVENT_FILE``), or None when it
    holds none (no file, no tensorboard to read it)."""
    path = None if folder is None else Path(folder) / EVENT_FILE
    if path is None or not path.is_file() or tensorboard_version() is None:
        return None
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    steps = [e.step for e in EventFileLoader(str(path)).Load() if e.HasField("summary")]
    return max(steps) if steps else None


def wandb_runs(folder: Path) -> int:
    """How many W&B runs earlier processes of this case left in ``folder/wandb`` (a ``run-*`` or
    ``offline-run-*`` folder each)."""
    runs = folder / "wandb"
    return (
        sum(
            1
            for p in runs.iterdir()
            if p.is_dir() and not p.is_symlink() and (p.name.startswith("run-") or p.name.startswith("offline-run-"))
        )
        if runs.is_dir()
        else 0
    )


class WandbWriter:
    """One W&B run in ``folder``/wandb, in the W&B group of its run id; every scalar is logged
    with its own ``step`` field."""

    # Its own step (define_metric): W&B's step may never go back, and the efficiency task logs
    # evaluation windows 0..n, then training windows 0..n.

    def __init__(self, folder: Path, name: str, config: dict, group: str | None = None):
        import wandb

        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "posbench"),
            name=name,
            group=group,
            dir=str(folder),
            config=config,
            reinit="finish_previous",
        )
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")

    def scalar(self, tag: str, value: float, step: int) -> None:
        self.run.log({tag: float(value), "step": int(step)})

    def close(self) -> None:
        self.run.finish()


class Tracker:
    """The writers of one case (none: every call is a no-op). A context manager: closing flushes."""

    def __init__(self, writers: list[Writer] | None = None, folder: Path | None = None):
        self.writers = list(writers or [])
        self.folder = folder

    @property
    def active(self) -> bool:
        return bool(self.writers)

    def scalar(self, tag: str, value: float | None, step: int) -> None:
        """Log ``value`` at ``step``; a None or non-finite value is left out (a curve with a gap)."""
        if value is None or not math.isfinite(float(value)):
            return
        for w in self.writers:
            w.scalar(tag, float(value), step)

    def scalars(self, values: dict[str, float | None], step: int) -> None:
        for tag, value in values.items():
            self.scalar(tag, value, step)

    def next_step(self) -> int:
        """The step after the last one this case's event file holds (0 for none): where a later
        process of the same case (a round of the efficiency task) goes on counting."""
        last = last_step(self.folder)
        return 0 if last is None else last + 1

    def by_length(self, key: str, L_valid: int, ppl: float | None) -> None:
        """Perplexity against evaluation length as one curve: ``<key>/ppl_vs_length`` at step
        ``L_valid`` (TensorBoard's x axis is the length)."""
        self.scalar(f"{key}/ppl_vs_length", ppl, L_valid)

    def window(self, phase: str, step: int, tokens_per_s: float, loss: float | None = None) -> None:
        """A timed task's measured window: ``<phase>/tokens_per_s`` (and ``train/loss``) at ``step``.
        Call it after the window's clock stopped: writing is never part of what a window times."""
        self.scalar(f"{phase}/tokens_per_s", tokens_per_s, step)
        if loss is not None:
            self.scalar(f"{phase}/loss", loss, step)

    def close(self) -> None:
        writers, self.writers = self.writers, []
        for w in writers:
            w.close()

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False


def open_tracker(folder: Path | None, name: str = "", config: dict[str, Any] | None = None) -> Tracker:
    """The tracker of one case: TensorBoard when importable, W&B when ``POSBENCH_LOG`` asks for it
    (grouped by ``config["run_id"]``), nothing without a folder, off rank 0, or with
    ``POSBENCH_LOG=none``."""
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
        name = name or folder.name
        earlier = wandb_runs(folder)  # a later round or a retry: a name of its own in the group
        config = config or {}
        writers.append(
            WandbWriter(
                folder,
                f"{name} #{earlier + 1}" if earlier else name,
                config,
                str(config["run_id"]) if config.get("run_id") else None,
            )
        )
    return Tracker(writers, folder)


def for_case(case, name: str | None = None) -> Tracker:
    """``open_tracker`` for ``case`` (``posbench.core.case.Case``) in its run folder; ``name``:
    the trained model's name (default the case id). W&B gets the case's settings as its config and
    the run id as its group, so the same case of two runs is told apart by its group."""
    name = name or case.id
    config = {
        "method": case.method,
        "task": case.task,
        "suite": case.suite,
        "run_id": case.run_id,
        "params": case.params.model_dump(),
        "settings": case.settings.model_dump(),
    }
    return open_tracker(case_folder(getattr(case, "out_dir", ""), name), name, config)
