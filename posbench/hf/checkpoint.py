"""Opening a Hugging Face checkpoint from a local folder: ``hf:DIR`` checked without importing
transformers (the CLI's one-line refusals), then the model and its tokenizer loaded offline.

No network at run time: ``HF_HUB_OFFLINE`` is set before transformers is imported, and a hub id in
place of a folder is refused with the command that downloads it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posbench.core.outcome import PosbenchError

PREFIX = "hf:"
EXTRA_HINT = "pip install posbench[hf]"
# model_type -> how its positions are encoded (posbench.hf.rope or posbench.hf.alibi)
FAMILIES = {"llama": "rope", "bloom": "alibi", "mpt": "alibi"}
# owner/name as the Hub spells it: what a folder that is not there most likely meant
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


class CheckpointError(PosbenchError):
    """A checkpoint that cannot be evaluated, said in one line."""


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
    """config.json's ``model_type``, checked against the families posbench knows."""
    import json

    try:
        model_type = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"hf:{folder}: config.json cannot be read ({exc})") from None
    if model_type not in FAMILIES:
        raise CheckpointError(
            f"hf:{folder}: model_type {model_type!r} is not supported; allowed: "
            f"{', '.join(FAMILIES)} (docs/hf-checkpoints.md says how to add one)"
        )
    return model_type


def load(spec: str, dtype, device) -> Checkpoint:
    """The checkpoint of ``hf:DIR`` in ``dtype`` on ``device``, in eval mode, read from disk only."""
    folder = folder_of(spec)
    model_type = model_type_of(folder)
    transformers = require_transformers()
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, local_files_only=True)
    model.to(device).eval()
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError):
        tokenizer = None  # a corpus of token ids still evaluates; text and the passkey probe need one
    return Checkpoint(folder, model, tokenizer, FAMILIES[model_type], model_type)
