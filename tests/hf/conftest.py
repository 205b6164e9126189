"""Tiny Hugging Face checkpoints for the hf tests, made once per session (each test file skips,
saying why, where transformers is not installed)."""

import pytest

from tests.helpers.hf_checkpoints import NEEDS_HF, save_checkpoint


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    """family -> folder of a tiny random-weight checkpoint and its tokenizer (save_pretrained)."""
    pytest.importorskip("transformers", reason=NEEDS_HF)
    root = tmp_path_factory.mktemp("hf")
    return {family: save_checkpoint(root / family, family) for family in ("llama", "bloom", "mpt")}
