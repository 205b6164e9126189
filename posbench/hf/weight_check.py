"""The weights in a checkpoint's safetensors files checked against the model its config builds,
before any is loaded: each weight the model has a place for must have that place's shape, and a
floating one a floating dtype. Only the files' headers are read (no tensor), and the model is built
on the meta device (no memory). A mismatch is one line naming the file, the weight, the expected and
the found shape and dtype.

Why before: transformers logs a mismatch in a table and then raises "For details look at the above
report!" (with its logging quiet, nothing is above), and a dtype relabelled in a header (F32 bytes
read as I32) loads as numbers that mean nothing, without a word. Weights the header check cannot
place (another name, a .bin file) are left to transformers, whose mismatches ``load_model``
translates into the same line.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import torch

from posbench.hf.folder_check import CheckpointError, one_line, shard_names

# Expected[weight name] = (shape, dtype): what the config-built model holds
Expected = dict[str, tuple[list[int], torch.dtype]]
ALLOWED = "allowed: weights saved by save_pretrained for this config.json"


def safetensors_files(folder: Path) -> list[str]:
    """The safetensors files transformers reads: model.safetensors, else the shards its index names."""
    if (folder / "model.safetensors").exists():
        return ["model.safetensors"]
    return sorted(n for n, index in shard_names(folder).items() if index.startswith("model.safetensors"))


def expected_weights(folder: Path, config, transformers, dtype) -> tuple[Expected, str]:
    """(each weight's shape and dtype, the base model prefix) of the model ``config`` describes,
    built on the meta device; a config no model can be built from (a dropout of -1) is one line."""
    try:
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=dtype)
    except Exception as exc:  # the layers' own checks of their arguments
        if isinstance(exc, MemoryError):
            raise
        raise CheckpointError(
            f"hf:{folder}: config.json: no model can be built from it ({one_line(exc)}); allowed: the file save_pretrained wrote"
        ) from None
    expected = {k: (list(v.shape), v.dtype) for k, v in model.state_dict().items()}
    return expected, model.base_model_prefix


def place_of(key: str, expected: Expected, prefix: str) -> str | None:
    """The model's name for the file's weight ``key`` (saved with or without the base model's
    prefix, as transformers reads both), or None when the model has no such place."""
    for name in (key, f"{prefix}.{key}", key.removeprefix(f"{prefix}.")):
        if name in expected:
            return name
    return None


def is_floating(dtype: str) -> bool:
    """Whether a safetensors dtype (F16, BF16, F32, F8_E4M3, I32, U8, BOOL, C64, ...) is floating."""
    return dtype.startswith(("F", "BF"))


def header(folder: Path, name: str) -> dict[str, tuple[list[int], str]]:
    """weight -> (shape, dtype) from the safetensors header of ``folder/name``, or one line."""
    from safetensors import safe_open

    try:
        with safe_open(os.fspath(folder / name), framework="pt") as fh:
            return {k: (list(fh.get_slice(k).get_shape()), fh.get_slice(k).get_dtype()) for k in fh.keys()}
    except Exception as exc:  # safetensors' own error on a damaged header
        raise CheckpointError(f"hf:{folder}: {name}: the weights cannot be read ({one_line(exc)}); {ALLOWED}") from None


def check_weights(folder: Path, config, transformers, dtype) -> None:
    """Every weight in the folder's safetensors files that the model has a place for fits it: the
    place's shape, and a floating dtype for a floating place; else one line naming it."""
    files = safetensors_files(folder)
    if not files:
        return  # .bin weights: transformers' own check, translated by load_model
    expected, prefix = expected_weights(folder, config, transformers, dtype)
    for name in files:
        for key, (shape, stored) in sorted(header(folder, name).items()):
            place = place_of(key, expected, prefix)
            if place is None:
                continue  # missing and unexpected weights: reported after loading
            want, want_dtype = expected[place]
            if shape != want or (want_dtype.is_floating_point and not is_floating(stored)):
                kind = "a floating dtype" if want_dtype.is_floating_point else str(want_dtype).replace("torch.", "")
                raise CheckpointError(
                    f"hf:{folder}: {name}: weight {key}: expected shape {want} of {kind}, found shape {shape} of {stored}; {ALLOWED}"
                )
