"""Tiny Hugging Face checkpoints for the hf tests, made once per session (each test file skips,
saying why, where transformers is not installed); the fixture lives in tests/helpers/hf_checkpoints.py,
where tests/tasks/test_extension_pretrained.py takes it too."""

from tests.helpers.hf_checkpoints import checkpoints  # noqa: F401  (session fixture)
