"""Hardening round 5 (issue 56): a seeded fuzz of checkpoint folders. Each mutation of config.json,
the tokenizer files or the weights ends in a loaded checkpoint or one line naming the file
(``CheckpointError``), never another exception, and never runs the Python files planted beside
them (a folder's ``auto_map`` is refused, transformers is never asked to trust it)."""

import json
import random
import shutil

import pytest
import torch

from posbench.hf.checkpoint import CheckpointError, load
from tests.helpers.hf_checkpoints import NEEDS_HF

SEED, CASES = 56, 60
ODD_VALUES = ["2", -1, 0, 1 << 40, None, [], {}, True, 1.5, "NaN", "", {"auto_map": {"AutoConfig": "evil.Config"}}]
NAMED = ("config.json", "tokenizer", "weight")  # every refusal names what it refused


def _mutate_json(path, rng) -> None:
    data = json.loads(path.read_text())
    how = rng.choice(["value", "value", "drop", "root", "auto_map"])
    if how == "value":
        data[rng.choice(sorted(data))] = rng.choice(ODD_VALUES)
    elif how == "drop":
        del data[rng.choice(sorted(data))]
    elif how == "root":
        data = rng.choice([[data], "text", 3, None])
    else:
        data["auto_map"] = {"AutoModelForCausalLM": "evil.Model", "AutoTokenizer": [None, "evil.Tokenizer"]}
    path.write_text(json.dumps(data))


def _mutate_bytes(path, rng) -> None:
    data = bytearray(path.read_bytes())
    how = rng.choice(["truncate", "flip", "empty", "garbage"])
    if how == "truncate":
        del data[rng.randrange(len(data)) :]
    elif how == "flip":
        for _ in range(8):
            data[rng.randrange(min(len(data), 200))] ^= 0xFF  # the header: lengths, JSON, dtypes
    elif how == "empty":
        data = bytearray()
    else:
        data = bytearray(rng.randbytes(rng.randrange(1, 4096)))
    path.write_bytes(bytes(data))


def test_mutated_checkpoint_folders_load_or_refuse_in_one_line(checkpoints, tmp_path):
    pytest.importorskip("transformers", reason=NEEDS_HF)
    rng = random.Random(SEED)
    marker = tmp_path / "code-ran"
    outcomes = {"loaded": 0, "refused": 0}
    for i in range(CASES):
        folder = shutil.copytree(checkpoints[rng.choice(["llama", "bloom", "mpt"])], tmp_path / f"c{i}")
        (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
        target = rng.choice(["config.json", "config.json", "tokenizer_config.json", "tokenizer.json", "model.safetensors"])
        if target == "model.safetensors" or rng.random() < 0.3:
            _mutate_bytes(folder / target, rng)
        else:
            _mutate_json(folder / target, rng)
        try:
            load(f"hf:{folder}", torch.float32, "cpu")
            outcomes["loaded"] += 1
        except CheckpointError as exc:
            text = str(exc)
            assert "\n" not in text and any(word in text for word in NAMED), (target, text)
            outcomes["refused"] += 1
        assert not marker.exists(), target
        shutil.rmtree(folder)
    assert outcomes["refused"] > CASES // 2 and outcomes["loaded"] > 0, outcomes
