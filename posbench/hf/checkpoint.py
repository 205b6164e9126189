"""Opening a Hugging Face checkpoint from a local folder: ``hf:DIR`` checked without importing
transformers (the CLI's one-line refusals), then the model and its tokenizer loaded offline.

No network at run time: ``HF_HUB_OFFLINE`` is set before transformers is imported, and a hub id in
place of a folder is refused with the command that downloads it. No code from the folder: it is
checked as data first (``posbench.hf.folder_check``) and read with ``trust_remote_code=False``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posbench.hf.folder_check import CheckpointError, check_config, check_files, check_size, check_tokenizer_config, one_line
from posbench.hf.weight_check import ALLOWED, check_weights

PREFIX = "hf:"
EXTRA_HINT = "pip install posbench[hf]"
# model_type -> how its positions are encoded (posbench.hf.rope or posbench.hf.alibi)
FAMILIES = {"llama": "rope", "bloom": "alibi", "mpt": "alibi"}
# owner/name as the Hub spells it: what a folder that is not there most likely meant
# files that mean the folder holds a tokenizer (transformers reads whichever it needs)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def folder_of(spec: str) -> Path:
    """The folder of ``hf:DIR`` (resolved), or one line saying what was wrong and what is allowed;
    reads only the file system."""
    if not isinstance(spec, str) or not spec.startswith(PREFIX) or not spec[len(PREFIX) :].strip():
        raise CheckpointError(
            f"--model {spec!r}: allowed: hf:DIR, a folder written by save_pretrained (a Hugging Face causal LM and its tokenizer)"
        )
    raw = spec[len(PREFIX) :].strip()
    folder = Path(raw).expanduser()
    if not folder.exists():
        if HUB_ID.match(raw):
            raise CheckpointError(
                f"--model {spec}: {raw} looks like a Hugging Face Hub id, and posbench reads no "
                f"network at run time; download it first (huggingface-cli download {raw} "
                "--local-dir DIR) and pass --model hf:DIR"
            )
        raise CheckpointError(f"--model {spec}: no such folder; allowed: hf:DIR, a folder written by save_pretrained")
    if not folder.is_dir():
        raise CheckpointError(f"--model {spec}: not a folder; allowed: hf:DIR, a folder written by save_pretrained")
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"--model {spec}: {folder} holds no config.json; allowed: a folder written by save_pretrained")
    return folder.resolve()


def require_transformers():
    """The transformers module, imported offline; without it one line naming the extra."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # before the import: the hub client reads it once
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import transformers
    except ImportError:
        raise CheckpointError(f"--model hf:DIR needs the Hugging Face extra: {EXTRA_HINT}") from None
    transformers.utils.logging.disable_progress_bar()
    return transformers


@dataclass
class Checkpoint:
    """A loaded checkpoint: the model (eval mode), its tokenizer (None without one), its config and family."""

    folder: Path
    model: Any
    tokenizer: Any
    family: str  # "rope" | "alibi"
    model_type: str

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_input_embeddings().weight.shape[0])

    def describe(self) -> dict:
        """What a row records of the checkpoint."""
        cfg = self.model.config
        return {
            "folder": str(self.folder),
            "model_type": self.model_type,
            "family": self.family,
            "vocab_size": self.vocab_size,
            "dtype": str(self.model.dtype).replace("torch.", ""),
            "rope_parameters": getattr(cfg, "rope_parameters", None),
            "tokenizer": type(self.tokenizer).__name__ if self.tokenizer is not None else None,
        }


def model_type_of(folder: Path) -> str:
    """config.json's ``model_type``, after the whole file is checked (``check_config``)."""
    return check_config(folder, FAMILIES)["model_type"]


def checked_folder(spec: str) -> Path:
    """The folder of ``hf:DIR`` with every check that needs no transformers: its files regular,
    config.json and tokenizer_config.json valid and naming no code of their own."""
    folder = folder_of(spec)
    check_files(folder)
    check_config(folder, FAMILIES)
    check_tokenizer_config(folder)
    return folder


def read_config(folder: Path, transformers):
    """transformers' config of the folder (defaults filled in), its sizes checked against the
    weight files before a layer is built."""
    try:
        config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # any parser's error on a damaged file: one line naming it
        raise CheckpointError(f"hf:{folder}: config.json: {one_line(exc)}") from None
    sizes = [getattr(config, name, None) for name in ("hidden_size", "num_hidden_layers", "vocab_size")]
    if not all(type(v) is int and v > 0 for v in sizes):
        raise CheckpointError(
            f"hf:{folder}: config.json gives hidden_size, num_hidden_layers, vocab_size {sizes}; allowed: positive integers"
        )
    check_size(folder, *sizes)
    return config


def load_model(folder: Path, config, transformers, dtype):
    """The model with every weight read from the folder: a weight the model needs and the files
    lack, one the files hold and the model has no place for, or one of the wrong shape is one line
    (a model left with random weights would give a number that means nothing). Mismatched shapes
    are let through transformers (``ignore_mismatched_sizes``) so that its report, which it only
    logs, becomes that line; the safetensors headers were checked before (``check_weights``)."""
    try:
        model, info = transformers.AutoModelForCausalLM.from_pretrained(
            folder,
            config=config,
            dtype=dtype,
            local_files_only=True,
            trust_remote_code=False,
            output_loading_info=True,
            ignore_mismatched_sizes=True,
        )
    except Exception as exc:  # safetensors', torch's or transformers' error on damaged weights
        if isinstance(exc, MemoryError) or "out of memory" in str(exc).lower():
            raise  # the case's oom row
        raise CheckpointError(f"hf:{folder}: the weights cannot be loaded ({one_line(exc)})") from None
    mismatched = sorted(info.get("mismatched_keys") or (), key=str)  # (name, file's shape, model's shape)
    if mismatched:
        key, found, want = mismatched[0]
        more = f" (and {len(mismatched) - 1} more of the wrong shape)" if len(mismatched) > 1 else ""
        raise CheckpointError(
            f"hf:{folder}: weight {key}: expected shape {list(want)}, found shape {list(found)}{more}; {ALLOWED}"
        )
    problems = {
        "missing_keys": "lack {n} weight(s) the model needs",
        "unexpected_keys": "hold {n} weight(s) the model has no place for",
    }
    for kind, problem in problems.items():
        keys = sorted(str(k) for k in info.get(kind) or ())
        if keys:
            shown = ", ".join(keys[:3]) + (", ..." if len(keys) > 3 else "")
            raise CheckpointError(f"hf:{folder}: the weight files {problem.format(n=len(keys))} ({shown}); {ALLOWED}")
    return model


def load_tokenizer(folder: Path, transformers):
    """The folder's tokenizer; None when it holds no tokenizer files; one line when they are
    there but cannot be read."""
    if not any((folder / n).exists() for n in TOKENIZER_FILES):
        return None  # a corpus of token ids still evaluates; text and the passkey probe need one
    try:
        return transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # the tokenizers library raises plain Exception on a damaged tokenizer.json
        if isinstance(exc, MemoryError):
            raise
        raise CheckpointError(
            f"hf:{folder}: the tokenizer cannot be loaded ({one_line(exc)}); allowed: files save_pretrained wrote"
        ) from None


def load(spec: str, dtype, device) -> Checkpoint:
    """The checkpoint of ``hf:DIR`` in ``dtype`` on ``device``, in eval mode, read from disk only."""
    folder = checked_folder(spec)
    model_type = model_type_of(folder)
    transformers = require_transformers()
    config = read_config(folder, transformers)
    check_weights(folder, config, transformers, dtype)
    model = load_model(folder, config, transformers, dtype)
    model.to(device).eval()
    ckpt = Checkpoint(folder, model, load_tokenizer(folder, transformers), FAMILIES[model_type], model_type)
    if ckpt.tokenizer is not None and len(ckpt.tokenizer) > ckpt.vocab_size:  # its ids would index past the embeddings
        raise CheckpointError(
            f"hf:{folder}: the tokenizer has {len(ckpt.tokenizer)} tokens but the model's vocabulary is {ckpt.vocab_size}; "
            "allowed: the tokenizer saved with this model"
        )
    return ckpt
