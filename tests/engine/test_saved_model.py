"""Checkpoint reuse (posbench/engine/saved_model.py): only this case's model is ever reused; a
damaged, linked or oversized file makes the case retrain, saying so in one line naming the file;
writes go to a fresh temp file in checkpoints/ and never through a planted link (issue 44)."""

from __future__ import annotations

import os

import pytest

from posbench.core.files import UnsafeFile
from posbench.core.model import model_config
from posbench.engine.train import Checkpointing, TrainConfig, trained_model
from tests.helpers.training import repeating_batches

TCFG = TrainConfig(steps=2, batch_size=4, seq_len=16, warmup_steps=1)


def cfg(method="alibi", d_model=32):
    return model_config("tiny", method, n_layers=1, d_model=d_model, n_heads=2, d_ff=64, vocab_size=16)


def run(ckpt, c=None, tcfg=TCFG):
    return trained_model(c or cfg(), tcfg, repeating_batches, "cpu", Checkpointing(ckpt, reuse=True))


@pytest.fixture
def ckpt(tmp_path):
    path = tmp_path / "run" / "checkpoints" / "case.pt"
    run(path)
    return path


@pytest.mark.parametrize(
    "other, why",
    [
        (dict(c=cfg("sinusoidal")), "stored for another model: method 'alibi' (this case: 'sinusoidal')"),
        (dict(c=cfg(d_model=64)), "stored for another model: d_model 32 (this case: 64)"),
        (
            dict(tcfg=TrainConfig(steps=3, batch_size=4, seq_len=16, warmup_steps=1)),
            "trained with another config: steps 2 (this case: 3)",
        ),
    ],
)
def test_a_checkpoint_of_another_model_or_config_is_never_reused(ckpt, capsys, other, why):
    model, _, reused = run(ckpt, **other)
    assert not reused
    assert model.cfg == other.get("c", cfg())
    err = capsys.readouterr().err
    assert err == f"note: {ckpt}: {why}; retraining this case (the new model replaces the file)\n"
    assert run(ckpt, **other)[2]  # the retrained model replaced it: reused next time


def test_the_same_case_reuses_its_checkpoint(ckpt, capsys):
    assert run(ckpt)[2] and capsys.readouterr().err == ""


def test_a_truncated_checkpoint_is_one_line_and_the_case_retrains(ckpt, capsys):
    ckpt.write_bytes(ckpt.read_bytes()[:1000])
    assert not run(ckpt)[2]
    err = capsys.readouterr().err
    assert err.startswith(f"note: {ckpt}: not a readable checkpoint (truncated or damaged: ") and err.count("\n") == 1
    assert run(ckpt)[2]  # retrained once, not failing on every retry


def test_an_oversized_checkpoint_is_not_read(ckpt, capsys):
    with open(ckpt, "ab") as fh:
        fh.truncate(ckpt.stat().st_size + (64 << 20))
    assert not run(ckpt)[2]
    assert "more than the" in capsys.readouterr().err


def test_a_planted_temp_link_is_never_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    os.symlink(victim, folder / "case.pt.tmp")
    run(folder / "case.pt")
    assert victim.read_text() == "keep me"
    assert (folder / "case.pt").is_file() and not (folder / "case.pt").is_symlink()
    assert not [p for p in folder.iterdir() if p.name.startswith(".case.pt.")]  # no temp file left


def test_a_checkpoint_that_is_a_link_is_not_followed(ckpt, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere.pt"
    os.replace(ckpt, elsewhere)
    os.symlink(elsewhere, ckpt)
    before = elsewhere.read_bytes()
    assert not run(ckpt)[2]
    assert "is a symbolic link" in capsys.readouterr().err
    assert elsewhere.read_bytes() == before and not ckpt.is_symlink()


def test_a_checkpoints_folder_that_is_a_link_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "run").mkdir()
    os.symlink(outside, tmp_path / "run" / "checkpoints")
    with pytest.raises(UnsafeFile, match=r"checkpoints is a symbolic link; posbench does not follow links"):
        run(tmp_path / "run" / "checkpoints" / "case.pt")
    assert list(outside.iterdir()) == []
