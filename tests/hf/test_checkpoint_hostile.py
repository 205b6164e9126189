"""Hardening round 5 (issue 56): a checkpoint folder never runs code, never passes for a model it
does not hold, and a config that would build something huge or odd is one line before anything is
built; ``--set pretrained=`` refuses what ``--model`` refuses, before any case runs."""

import json
import shutil
import subprocess

import pytest
import torch

from posbench.cli import app as cli
from posbench.hf.checkpoint import CheckpointError, load
from tests.helpers.hf_checkpoints import NEEDS_HF

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture
def folder(checkpoints, tmp_path):
    """A copy of the tiny Llama checkpoint to damage."""
    pytest.importorskip("transformers", reason=NEEDS_HF)
    return shutil.copytree(checkpoints["llama"], tmp_path / "llama")


def _edit_json(path, **changes):
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def _refusal(folder, match: str) -> str:
    with pytest.raises(CheckpointError, match=match) as info:
        load(f"hf:{folder}", torch.float32, "cpu")
    assert "\n" not in str(info.value)
    return str(info.value)


def test_code_a_checkpoint_names_is_refused_and_never_imported(folder, tmp_path):
    marker = tmp_path / "ran"
    (folder / "tokenization_mine.py").write_text(
        f"open({str(marker)!r}, 'w').write('imported')\n"
        "from transformers import PreTrainedTokenizerFast\n"
        "class MineTokenizer(PreTrainedTokenizerFast):\n    pass\n"
    )
    _edit_json(
        folder / "tokenizer_config.json",
        tokenizer_class="MineTokenizer",
        auto_map={"AutoTokenizer": [None, "tokenization_mine.MineTokenizer"]},
    )
    _refusal(folder, r"tokenizer_config.json names code of its own \(auto_map\)")
    (folder / "tokenizer_config.json").unlink()
    _edit_json(folder / "config.json", auto_map={"AutoModelForCausalLM": "tokenization_mine.MineTokenizer"})
    _refusal(folder, r"config.json names code of its own \(auto_map\)")
    assert not marker.exists()


def test_workers_read_no_stdin(monkeypatch):
    """A prompt in anything a worker loads (transformers' "run the custom code? [y/N]") must not
    read an answer piped to bench.py: the worker's stdin is /dev/null."""
    from posbench.core.case import CaseSpec
    from posbench.run import launch

    seen = {}

    def popen(cmd, **kwargs):
        seen.update(kwargs)
        raise OSError("stop here")

    monkeypatch.setattr(launch.subprocess, "Popen", popen)
    monkeypatch.setattr(launch, "worker_env", lambda case: {})
    monkeypatch.setattr(launch, "worker_command", lambda *a: ["true"])
    case = CaseSpec.__new__(CaseSpec)
    with pytest.raises(OSError, match="stop here"):
        launch._spawn(case, {}, 5.0)
    assert seen["stdin"] is subprocess.DEVNULL


def test_weights_the_model_needs_must_all_be_there(folder):
    from safetensors.torch import load_file, save_file

    weights = load_file(folder / "model.safetensors")
    save_file({"junk": torch.zeros(len(weights) * 4096)}, folder / "model.safetensors")
    text = _refusal(folder, r"the weight files lack \d+ weight\(s\) the model needs")
    assert "lm_head.weight" in text
    weights["extra.weight"] = torch.zeros(3)
    save_file(weights, folder / "model.safetensors")
    _refusal(folder, r"hold 1 weight\(s\) the model has no place for \(extra.weight\)")
    del weights["extra.weight"]
    weights["model.norm.weight"] = torch.zeros(5)
    save_file(weights, folder / "model.safetensors")
    _refusal(folder, "weight")


@pytest.mark.parametrize(
    "config, words",
    [
        ([1, 2], "config.json holds a JSON list; allowed: a JSON object"),
        ({"num_hidden_layers": "2"}, 'num_hidden_layers is "2"; allowed: an integer from 1 to 1024'),
        ({"hidden_size": True}, "hidden_size is true"),
        ({"num_hidden_layers": 1_000_000}, "num_hidden_layers is 1000000"),
        ({"num_hidden_layers": 1000}, "describes at least .* parameters .* but the weight files hold"),
        ({"rope_theta": "big"}, "rope_theta .* allowed: a positive number"),
        ({"rope_parameters": [1]}, "rope_parameters .* allowed: a JSON object or null"),
        ({"model_type": "gpt2"}, "model_type 'gpt2' is not supported"),
    ],
)
def test_config_is_checked_before_anything_is_built(folder, config, words):
    if isinstance(config, dict):
        _edit_json(folder / "config.json", **config)
    else:
        (folder / "config.json").write_text(json.dumps(config))
    _refusal(folder, words)


def test_a_tokenizer_larger_than_the_vocabulary_is_one_line(folder):
    _edit_json(folder / "config.json", vocab_size=200)
    from safetensors.torch import load_file, save_file

    weights = {k: (v[:200] if v.shape[0] == 300 else v) for k, v in load_file(folder / "model.safetensors").items()}
    save_file(weights, folder / "model.safetensors")
    _refusal(folder, r"the tokenizer has 300 tokens but the model's vocabulary is 200")


def test_a_fifo_in_the_folder_is_one_line(folder):
    (folder / "tokenizer.json").unlink()
    import os

    os.mkfifo(folder / "tokenizer.json")
    _refusal(folder, "tokenizer.json is a FIFO; allowed: a regular file")


def _run(argv, capsys):
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.subprocess  # the CLI reads the method files in a child process
def test_set_pretrained_refuses_what_model_refuses_before_any_case(folder, tmp_path, capsys):
    base = ["--suite", "extrapolation", "--profile", "cpu", "--results", str(tmp_path / "r")]
    code, out, err = _run(base + ["--set", f"pretrained=hf:{tmp_path}/none"], capsys)
    assert code == cli.EXIT_USAGE and "no such folder" in err and err.count("\n") == 1
    _edit_json(folder / "config.json", model_type="gpt2")
    code, out, err = _run(base + ["--set", f"pretrained=hf:{folder}", "--dry-run"], capsys)
    assert code == cli.EXIT_USAGE and "model_type 'gpt2' is not supported" in err and out == ""
    assert not (tmp_path / "r").exists()


@pytest.mark.subprocess  # the CLI reads the method files in a child process
def test_settings_a_checkpoint_ignores_are_refused(checkpoints, capsys):
    for setting in ["model_overrides.window=1", "model_overrides.n_kv_heads=1", "model=small"]:
        argv = ["--suite", "extrapolation", "--profile", "cpu", "--model", f"hf:{checkpoints['llama']}", "--set", setting]
        code, out, err = _run(argv + ["--dry-run"], capsys)
        assert code == cli.EXIT_USAGE and out == "" and err.count("\n") == 1
        assert f"--set {setting.split('=')[0]}: a checkpoint" in err and "would not apply" in err


@pytest.mark.subprocess  # the CLI reads the method files in a child process
def test_a_model_folder_named_with_an_emoji_is_read_as_a_path(checkpoints, tmp_path, capsys):
    folder = shutil.copytree(checkpoints["llama"], tmp_path / "ckpt \U0001f600")
    code, out, err = _run(["--suite", "extrapolation", "--profile", "cpu", "--model", f"hf:{folder}", "--dry-run"], capsys)
    assert code == 0, err
    assert json.loads(out.splitlines()[1].removeprefix("settings: "))["pretrained"] == f"hf:{folder.resolve()}"


@pytest.mark.subprocess  # the CLI reads the method files in a child process
def test_extension_dry_run_says_the_checkpoints_L_train_and_the_recipes_that_do_not_fit(tmp_path, capsys):
    from tests.helpers.hf_checkpoints import save_checkpoint

    folder = save_checkpoint(tmp_path / "llama48", "llama", max_len=48)
    base = ["--suite", "extension", "--profile", "cpu", "--model", f"hf:{folder}", "--results", str(tmp_path / "r")]
    code, out, err = _run(base + ["--dry-run"], capsys)
    assert code == 0, err
    cases = [line.split()[:2] for line in out.splitlines() if line.startswith("  ")]
    assert cases and all("/L_train=48/" in case_id for _, case_id in cases)  # config.json's length, as the tables say
    assert {case_id.split("/")[0] for word, case_id in cases if word == "unavailable"} == {"alibi"}
    assert "does not apply to a llama checkpoint (rope positions)" in out
    code, out, err = _run(base + ["--set", "grid.L_train=[64]", "--dry-run"], capsys)
    assert code == cli.EXIT_USAGE and "extended from L_train 48 (config.json max_position_embeddings), not [64]" in err
