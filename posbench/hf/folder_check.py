"""A checkpoint folder checked as data before transformers reads it: the files it will open are
regular files (each shard a shard index names too, whatever it is called), the JSON files nest at
most ``MAX_JSON_DEPTH`` deep, ``config.json`` is a JSON object whose sizes are integers within
bounds, and nothing in it names code to import (``auto_map``). Each problem is one line naming the
file.

Why before: transformers builds every layer a config claims (a million layers is minutes and
gigabytes), reports a string-typed size with its own bare error, and imports a Python file that a
config's ``auto_map`` names when asked to trust it. posbench never asks (``trust_remote_code=False``)
and refuses such a folder outright, so no prompt or flag can change that.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from itertools import accumulate
from pathlib import Path

from posbench.core.nofollow import UnsafeFile, file_kind, read_regular
from posbench.core.outcome import PosbenchError

MAX_JSON_BYTES = 16 << 20  # config.json and tokenizer_config.json (a tokenizer.json may be larger)
MAX_JSON_DEPTH = 64  # arrays and objects in one another (save_pretrained's JSON nests 3 or 4 deep)
# config keys naming a size -> the largest value allowed (a 405B model needs none larger)
SIZE_BOUNDS = {
    "vocab_size": 1 << 22,
    "hidden_size": 1 << 16,
    "n_embed": 1 << 16,
    "d_model": 1 << 16,
    "intermediate_size": 1 << 20,
    "num_hidden_layers": 1024,
    "n_layer": 1024,
    "n_layers": 1024,
    "num_attention_heads": 1024,
    "n_head": 1024,
    "n_heads": 1024,
    "num_key_value_heads": 1024,
    "head_dim": 1 << 12,
    "max_position_embeddings": 1 << 24,
    "max_seq_len": 1 << 24,
    "expansion_ratio": 64,
}
POSITIVE_NUMBERS = ("rope_theta", "layer_norm_epsilon", "rms_norm_eps", "initializer_range")
MAPPINGS = ("rope_parameters", "rope_scaling", "attn_config")
# shard indexes: their weight_map names the file each weight is in, by any name (transformers opens them all)
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
# files transformers opens from a checkpoint folder (read as data: they must be regular files)
DATA_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    *INDEX_FILES,
)
WEIGHT_SUFFIXES = (".safetensors", ".bin")
LENGTH_KEYS = ("max_position_embeddings", "max_seq_len")  # where a config names its training length
BYTES_PER_PARAM_FLOOR = 0.5  # 4-bit weights: the least a stored parameter takes


class CheckpointError(PosbenchError):
    """A checkpoint that cannot be evaluated, said in one line."""


# a JSON string, escapes included: dropped before brackets are counted
JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
NOT_A_BRACKET = re.compile(r"[^\[\]{}]+")
BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str) -> int:
    """How deep ``text``'s arrays and objects nest (0 for a scalar), counted in one pass over its
    brackets outside strings: no recursion, whatever the depth (``json.loads`` and every walk of
    its value recurse once per level)."""
    brackets = NOT_A_BRACKET.sub("", JSON_STRING.sub("", text))
    return max(accumulate(BRACKET_STEP[c] for c in brackets), default=0)


def read_json(folder: Path, name: str) -> object:
    """The JSON value of ``folder/name`` (a regular file of at most 16 MiB nesting at most
    ``MAX_JSON_DEPTH`` deep), or one line."""
    try:
        text = str(read_regular(folder / name, MAX_JSON_BYTES), "utf-8")
        if json_depth(text) > MAX_JSON_DEPTH:
            raise CheckpointError(
                f"hf:{folder}: {name} nests JSON deeper than {MAX_JSON_DEPTH} levels; allowed: at most {MAX_JSON_DEPTH}"
            )
        return json.loads(text)
    except UnsafeFile as exc:
        raise CheckpointError(f"hf:{folder}: {name}: {exc}") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CheckpointError(
            f"hf:{folder}: {name} is not readable JSON ({one_line(exc)}); allowed: the file save_pretrained wrote"
        ) from None


def one_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message, cut to ``limit`` characters."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shard_names(folder: Path) -> dict[str, str]:
    """file name -> the shard index naming it, for every file the folder's shard indexes name; each
    a plain file name (no path: transformers joins it to the folder), or one line."""
    shards = {}
    for index in INDEX_FILES:
        if not os.path.lexists(folder / index):
            continue
        weight_map = read_json(folder, index)
        weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise CheckpointError(
                f"hf:{folder}: {index} is not a shard index; allowed: a JSON object whose weight_map maps weight names to file names"
            )
        for name in weight_map.values():
            if name in ("", ".", "..") or any(c in name for c in "/\\\0"):
                raise CheckpointError(f"hf:{folder}: {index} names the shard {name[:60]!r}; allowed: a file name in the folder")
            shards[name] = index
    return shards


def check_shard(folder: Path, name: str, index: str) -> None:
    """The shard ``name`` that ``index`` names is a regular file in the folder, or a link to one
    inside it: never a FIFO (transformers would block opening it), a device or a file elsewhere."""
    path = folder / name
    if os.path.islink(path) and os.path.commonpath([os.path.realpath(path), folder]) != str(folder):
        raise CheckpointError(
            f"hf:{folder}: {index} names {name}, which is a link out of the folder; allowed: a regular file in the folder"
        )
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise CheckpointError(f"hf:{folder}: {index} names {name}, which is not in the folder; allowed: a regular file") from None
    except OSError as exc:
        raise CheckpointError(f"hf:{folder}: {index} names {name}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        raise CheckpointError(f"hf:{folder}: {index} names {name}, which is {file_kind(mode)}; allowed: a regular file")


def check_files(folder: Path) -> None:
    """Each file transformers would open is a regular file (a link to one is fine: the Hub's cache
    is links), and each file a shard index names is one in the folder; a FIFO, a device or a
    dangling link is one line, never a hang."""
    for name, index in shard_names(folder).items():
        check_shard(folder, name, index)
    names = [n for n in DATA_FILES] + sorted(n for n in os.listdir(folder) if n.endswith(WEIGHT_SUFFIXES) or n.endswith(".py"))
    for name in names:
        path = folder / name
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            if os.path.islink(path):
                raise CheckpointError(f"hf:{folder}: {name} is a link to nothing; allowed: a regular file") from None
            continue
        except OSError as exc:
            raise CheckpointError(f"hf:{folder}: {name}: {exc.strerror or exc}") from None
        if name.endswith(".py"):
            continue  # never imported (below); listed so a FIFO named *.py is not opened either
        if not stat.S_ISREG(mode):
            raise CheckpointError(f"hf:{folder}: {name} is {file_kind(mode)}; allowed: a regular file")


def names_code(value: object) -> bool:
    """Whether a config names code of its own: an ``auto_map`` anywhere in it."""
    if isinstance(value, dict):
        return "auto_map" in value or any(names_code(v) for v in value.values())
    if isinstance(value, list):
        return any(names_code(v) for v in value)
    return False


def refuse_code(folder: Path, name: str, value: object) -> None:
    if names_code(value):
        raise CheckpointError(
            f"hf:{folder}: {name} names code of its own (auto_map); posbench never runs code from a checkpoint "
            "folder; allowed: a model_type transformers itself implements (remove auto_map)"
        )


def check_config(folder: Path, families: dict) -> dict:
    """``config.json`` read and checked: a JSON object, a known ``model_type``, no ``auto_map``,
    every size an integer within ``SIZE_BOUNDS``, numbers finite and positive; the dict."""
    config = read_json(folder, "config.json")
    if not isinstance(config, dict):
        raise CheckpointError(
            f"hf:{folder}: config.json holds a JSON {type(config).__name__}; allowed: a JSON object (what save_pretrained writes)"
        )
    model_type = config.get("model_type")
    if model_type not in families:
        raise CheckpointError(
            f"hf:{folder}: config.json: model_type {str(model_type)[:60]!r} is not supported; allowed: "
            f"{', '.join(families)} (docs/hf-checkpoints.md says how to add one)"
        )
    refuse_code(folder, "config.json", config)
    for key, bound in SIZE_BOUNDS.items():
        value = config.get(key)
        if key in config and (type(value) is not int or not 1 <= value <= bound):
            raise CheckpointError(
                f"hf:{folder}: config.json: {key} is {json.dumps(value)[:60]}; allowed: an integer from 1 to {bound}"
            )
    for key in POSITIVE_NUMBERS:
        value = config.get(key)
        if key in config and (type(value) not in (int, float) or not math.isfinite(value) or value <= 0):
            raise CheckpointError(f"hf:{folder}: config.json: {key} is {json.dumps(value)[:60]}; allowed: a positive number")
    for key in MAPPINGS:
        if config.get(key) is not None and not isinstance(config[key], dict):
            raise CheckpointError(
                f"hf:{folder}: config.json: {key} is {json.dumps(config[key])[:60]}; allowed: a JSON object or null"
            )
    return config


def check_tokenizer_config(folder: Path) -> None:
    """tokenizer_config.json, when there: a JSON object naming no code of its own."""
    if not (folder / "tokenizer_config.json").exists():
        return
    config = read_json(folder, "tokenizer_config.json")
    if not isinstance(config, dict):
        raise CheckpointError(f"hf:{folder}: tokenizer_config.json holds a JSON {type(config).__name__}; allowed: a JSON object")
    refuse_code(folder, "tokenizer_config.json", config)


def weight_bytes(folder: Path) -> int:
    """Bytes of the folder's weight files (*.safetensors, *.bin and the shards an index names)."""
    names = {n for n in os.listdir(folder) if n.endswith(WEIGHT_SUFFIXES)} | set(shard_names(folder))
    return sum(os.stat(folder / n).st_size for n in names)


def check_size(folder: Path, hidden: int, layers: int, vocab: int) -> None:
    """The model the config describes has at least ``layers * 2 * hidden^2 + vocab * hidden``
    parameters (its query and output projections and embeddings); weight files too small to hold
    them are one line before anything is built (a config claiming a million layers builds none)."""
    least = layers * 2 * hidden * hidden + vocab * hidden
    held = weight_bytes(folder)
    if held < least * BYTES_PER_PARAM_FLOOR:
        raise CheckpointError(
            f"hf:{folder}: config.json describes at least {least:,} parameters ({layers} layers of width {hidden}, "
            f"vocabulary {vocab}) but the weight files hold {held:,} bytes; allowed: a config.json that matches "
            "its weights (model.safetensors)"
        )


def config_length(folder: Path) -> tuple[int, str] | None:
    """(the training length config.json names, which key), or None when it names none."""
    config = read_json(folder, "config.json")
    for key in LENGTH_KEYS:
        value = config.get(key) if isinstance(config, dict) else None
        if type(value) is int and value >= 2:
            return value, f"config.json {key}"
    return None
