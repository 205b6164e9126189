"""Opening a checkpoint: the one-line refusals (no transformers, a hub id, not a folder, an unknown
family, a suite that evaluates no checkpoint), text through the checkpoint's tokenizer, token ids
that do not fit its vocabulary, and the text passkey probe."""

import json
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from posbench.cli import app as cli
from posbench.hf.checkpoint import CheckpointError, folder_of, model_type_of, require_transformers
from tests.helpers.hf_checkpoints import L_TRAIN, NEEDS_HF, SENTENCES


def _run(argv, capsys) -> tuple[int, str, str]:
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.subprocess  # the CLI reads the method files in a child process
def test_without_transformers_one_line_names_the_extra(tmp_path, monkeypatch, capsys):
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "transformers" else real(name, *a))
    code, out, err = _run(["--suite", "extrapolation", "--model", f"hf:{tmp_path}", "--dry-run"], capsys)
    assert code == cli.EXIT_USAGE and out == ""
    assert err.strip().count("\n") == 0 and "pip install posbench[hf]" in err
    monkeypatch.setitem(sys.modules, "transformers", None)  # the worker's import fails the same way
    with pytest.raises(CheckpointError, match=r"needs the Hugging Face extra: pip install posbench\[hf\]"):
        require_transformers()


@pytest.mark.subprocess  # the CLI reads the method files in a child process
def test_a_hub_id_says_to_download_it_first(capsys):
    pytest.importorskip("transformers", reason=NEEDS_HF)
    code, out, err = _run(["--suite", "extrapolation", "--model", "hf:meta-llama/Llama-2-7b-hf", "--dry-run"], capsys)
    assert code == cli.EXIT_USAGE and err.strip().count("\n") == 0
    assert "Hub id" in err and "no network at run time" in err and "download it first" in err


def test_bad_specs_are_one_line_each(tmp_path):
    for spec, words in [
        ("llama", "allowed: hf:DIR"),
        ("hf:", "allowed: hf:DIR"),
        (f"hf:{tmp_path}/none", "no such folder"),
        (f"hf:{tmp_path}", "holds no config.json"),
    ]:
        with pytest.raises(CheckpointError, match=words):
            folder_of(spec)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(CheckpointError, match="model_type 'gpt2' is not supported; allowed: llama, bloom, mpt"):
        model_type_of(folder_of(f"hf:{tmp_path}"))


@pytest.mark.subprocess  # the CLI reads the method files in a child process
def test_a_suite_whose_task_evaluates_no_checkpoint_refuses_model(checkpoints, capsys):
    code, _, err = _run(["--suite", "efficiency", "--model", f"hf:{checkpoints['llama']}", "--dry-run"], capsys)
    assert code == cli.EXIT_USAGE
    assert "evaluates no pretrained checkpoint; allowed with: extension, extrapolation" in err  # extension: issue 41


@pytest.mark.subprocess  # the CLI reads the method files in a child process
def test_model_sets_the_pretrained_setting(checkpoints, capsys):
    code, out, _ = _run(
        ["--suite", "extrapolation", "--profile", "cpu", "--model", f"hf:{checkpoints['mpt']}", "--dry-run"], capsys
    )
    assert code == 0
    settings = json.loads(out.splitlines()[1].removeprefix("settings: "))
    assert settings["pretrained"] == f"hf:{checkpoints['mpt'].resolve()}"


def _settings(**corpus):
    from posbench.tasks.extrapolation.task import Settings

    return Settings(model="tiny", steps=1, corpus=corpus, eval_tokens=2000)


def test_text_corpus_is_encoded_with_the_checkpoints_tokenizer(checkpoints, tmp_path):
    pytest.importorskip("transformers", reason=NEEDS_HF)
    from posbench.hf.checkpoint import load
    from posbench.protocols.pretrained_eval import pretrained_tokens

    text = " ".join(SENTENCES * 20)
    (tmp_path / "train.txt").write_text(text)
    (tmp_path / "valid.txt").write_text(text[::-1][:400] + text)
    ckpt = load(f"hf:{checkpoints['llama']}", torch.float32, "cpu")
    ids, corpus = pretrained_tokens(
        _settings(kind="text", path=str(tmp_path), splits={"train": "train.txt", "valid": "valid.txt"}), ckpt
    )
    want = ckpt.tokenizer(text[::-1][:400] + text, add_special_tokens=False)["input_ids"][:2000]
    assert ids.tolist() == want and corpus["tokenizer"] == type(ckpt.tokenizer).__name__
    ids, _ = pretrained_tokens(_settings(kind="text", path=str(tmp_path / "train.txt")), ckpt)
    whole = ckpt.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids.tolist() == whole[len(whole) - len(whole) // 10 :]  # the tail, as load_corpus holds out


def test_token_ids_beyond_the_vocabulary_are_one_line(checkpoints):
    pytest.importorskip("transformers", reason=NEEDS_HF)
    from posbench.data.token_cache import DataError
    from posbench.hf.checkpoint import load
    from posbench.protocols.pretrained_eval import pretrained_tokens

    ckpt = load(f"hf:{checkpoints['llama']}", torch.float32, "cpu")
    settings = _settings(kind="synthetic", size=20000, synthetic={"vocab": 64})
    ids, _ = pretrained_tokens(settings, ckpt)
    assert ids.max() < 64 and ids.dtype == np.int64
    small = SimpleNamespace(vocab_size=40, tokenizer=None)  # a checkpoint whose vocabulary the ids outgrow
    with pytest.raises(
        DataError,
        match=r"token ids up to 6\d do not fit the checkpoint's vocabulary of 40; allowed: "
        "a text corpus",
    ):
        pretrained_tokens(settings, small)


def test_passkey_probe_is_exact_match_under_greedy_decoding(checkpoints):
    pytest.importorskip("transformers", reason=NEEDS_HF)
    from posbench.hf.checkpoint import load
    from posbench.hf.passkey import Probes, example, passkey_accuracy

    tok = load(f"hf:{checkpoints['llama']}", torch.float32, "cpu").tokenizer
    ids, start = example(tok, 120, 0.5, 71432)
    assert len(ids) == 120 and tok.decode(ids[start:]).strip() == "71432"
    assert "The pass key is 71432" in tok.decode(ids[:start]) and example(tok, 20, 0.5, 71432) is None

    class Reader:  # a plain reference: predicts each probe's true next token, or a wrong one
        def __init__(self, right: bool):
            self.right = right

        def __call__(self, idx, pos=None):
            nxt = torch.roll(idx, -1, dims=1) if self.right else torch.zeros_like(idx)
            return torch.nn.functional.one_hot(nxt, 300).float()  # (B, T, V)

    right = passkey_accuracy(Reader(True), Probes(tok, 120, 3, 0), "cpu")
    assert right["accuracy"] == 1.0 and right["trials"] == 3 and right["depths"] == [0.0, 0.5, 1.0]
    assert passkey_accuracy(Reader(False), Probes(tok, 120, 3, 0), "cpu")["accuracy"] == 0.0
    assert passkey_accuracy(Reader(True), Probes(tok, 20, 3, 0), "cpu")["accuracy"] is None


def test_run_pretrained_records_checks_passkey_and_unavailable_interpolation(checkpoints):
    pytest.importorskip("transformers", reason=NEEDS_HF)
    from posbench.tasks.extrapolation.run import run
    from posbench.tasks.extrapolation.task import Params, Settings

    s = Settings(
        model="tiny",
        steps=1,
        pretrained=f"hf:{checkpoints['llama']}",
        L_valid_factors=[1, 4],
        modes=["nonoverlapping"],
        interpolate=True,
        eval_tokens=300,
        passkey_trials=2,
        corpus={"kind": "synthetic", "size": 20000, "synthetic": {"vocab": 64}},
    )
    case = SimpleNamespace(settings=s, params=Params(L_train=L_TRAIN), method="rotary_llama3", device="cpu", id="x", out_dir=None)
    r = run(case)
    assert r["series"]["rope_checks"]["64"]["rope_type"] == "llama3"
    assert r["series"]["rope_checks"]["64"]["max_rel_freq_diff"] <= 1e-5
    assert np.isfinite(r["metrics"]["ppl@nonoverlapping@64"]) and r["metrics"]["passkey@64"] in (0.0, 0.5, 1.0)
    interp = [e for e in r["series"]["evals"] if e["interpolate"]]
    assert interp and all(e["status"] == "unavailable" and "rescales positions itself" in e["message"] for e in interp)
