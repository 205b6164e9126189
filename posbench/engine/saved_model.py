"""A case's trained model on disk: written to a fresh temp file and renamed, read without following
a link and within a size bound, and reused only when it holds this case's model.

A checkpoint that is damaged, a link, or stored for another model or training config is never
used: the case retrains (one line on stderr says why) and the new model replaces the file. A
planted pickle is refused, never run (``weights_only``). docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pickle
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from posbench.core.files import UnsafeFile, new_file_mode, open_lock, open_nofollow, own_folder
from posbench.core.model import TransformerLM, build_model

SLACK_BYTES = 16 << 20  # beyond twice the tensors: configs, the loss curve, zip headers


@contextlib.contextmanager
def exclusive(ckpt: Path | None):
    """Hold a lock beside ``ckpt`` so that, under ``--parallel``, one case trains a model that several
    cases share and the others wait and reuse it instead of training it again."""
    if ckpt is None:
        yield
        return
    own_folder(ckpt.parent)
    fd = open_lock(ckpt.with_name(f".{ckpt.name}.lock"))  # a planted link there: one line, nothing created
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


class BadCheckpoint(ValueError):
    """A checkpoint that cannot be this case's model; the message is one line naming the file."""


def save_checkpoint(path, model: TransformerLM, cfg, result) -> None:
    """``{model_config, model, train_config, result}`` to ``path``: written to a new temp file in
    the same folder (``O_EXCL | O_NOFOLLOW``: a planted link is never written through), fsynced,
    then renamed over ``path``, so an interrupted save never leaves a truncated checkpoint."""
    path = Path(path)
    folder = own_folder(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        os.fchmod(fd, new_file_mode())  # as open() would: readable by the group under umask 022
        with os.fdopen(fd, "wb") as fh:
            torch.save(
                {
                    "model_config": asdict(model.cfg),
                    "model": model.state_dict(),
                    "train_config": asdict(cfg),
                    "result": asdict(result),
                },
                fh,
            )
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_checkpoint(path, device="cpu", limit: int | None = None) -> dict:
    """The stored dict of ``path``: a regular file (no link followed) of at most ``limit`` bytes,
    loaded with ``weights_only`` (tensors and plain containers only). ``BadCheckpoint`` otherwise."""
    try:
        fd = open_nofollow(path, os.O_RDONLY)
    except (UnsafeFile, OSError) as exc:
        raise BadCheckpoint(str(exc) if isinstance(exc, UnsafeFile) else f"{path}: cannot read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if limit is not None and size > limit:
            raise BadCheckpoint(f"{path}: {size} bytes, more than the {limit} this case's model needs")
        try:
            blob = torch.load(fh, map_location=device, weights_only=True)
        except pickle.UnpicklingError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise ValueError(
                f"{path}: not a plain posbench checkpoint, refused without running it ({first}); "
                "allowed: checkpoints written by posbench (delete this file to retrain)"
            ) from None
        except Exception as exc:  # torch's zip reader: truncated, damaged, not a checkpoint at all
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            raise BadCheckpoint(f"{path}: not a readable checkpoint (truncated or damaged: {first})") from None
    if not (isinstance(blob, dict) and {"model_config", "model", "result"} <= set(blob)):
        raise BadCheckpoint(f"{path}: not a posbench checkpoint (it lacks model_config, model or result)")
    return blob


def load_checkpoint(path, device="cpu") -> tuple[TransformerLM, dict]:
    """The trained model (eval mode) and the checkpoint's metadata."""
    from posbench.core.method import ModelConfig

    blob = read_checkpoint(path, device)
    model = build_model(ModelConfig(**blob["model_config"]))
    model.load_state_dict(blob["model"])
    return model.to(device).eval(), blob


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))  # tuples as lists: a config compares as stored


def _differs(stored: Any, wanted: dict) -> str | None:
    """``key stored (this case: wanted)`` for the first key on which the configs differ."""
    stored, wanted = _plain(stored), _plain(wanted)
    if not isinstance(stored, dict):
        return "no config"
    for key in sorted(set(stored) | set(wanted)):
        if stored.get(key) != wanted.get(key):
            return f"{key} {stored.get(key)!r:.80} (this case: {wanted.get(key)!r:.80})"
    return None


def reused_model(path: Path, cfg, tcfg, device) -> tuple[TransformerLM, dict] | None:
    """The model stored at ``path`` when it is this case's (same model config, same training
    config) and readable; else None, after one line on stderr saying why the case retrains."""
    model = build_model(cfg)
    tensors = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    try:
        blob = read_checkpoint(path, device, limit=2 * tensors + SLACK_BYTES)
        why = _differs(blob["model_config"], asdict(cfg))
        if why:
            raise BadCheckpoint(f"{path}: stored for another model: {why}")
        why = _differs(blob.get("train_config"), asdict(tcfg))
        if why:
            raise BadCheckpoint(f"{path}: trained with another config: {why}")
        try:
            model.load_state_dict(blob["model"])
        except (RuntimeError, TypeError, KeyError) as exc:
            raise BadCheckpoint(
                f"{path}: its weights do not fit this case's model ({str(exc).strip().splitlines()[0][:200]})"
            ) from None
    except BadCheckpoint as exc:
        print(f"note: {exc}; retraining this case (the new model replaces the file)", file=sys.stderr)
        return None
    return model.to(device).eval(), blob
