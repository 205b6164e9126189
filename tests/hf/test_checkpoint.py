"""Opening a checkpoint: the one-line refusals (no transformers, a hub id, not a folder, an unknown
family, a suite that evaluates no checkpoint), text through the checkpoint's tokenizer, token ids
that do not fit its vocabulary, and the text passkey probe."""

import json
import random
import re
import shutil
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from posbench.cli import app as cli
from posbench.hf.checkpoint import CheckpointError, folder_of, load, model_type_of, require_transformers
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


# --------------------------------------------------------------------------------------------------
# Hardening round 5 (issue 56): a seeded fuzz of checkpoint folders. Each mutation of config.json,
# the tokenizer files or the weights ends in a loaded checkpoint or one line naming the file
# (``CheckpointError``), never another exception, and never runs the Python files planted beside
# them (a folder's ``auto_map`` is refused, transformers is never asked to trust it).

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


# --------------------------------------------------------------------------------------------------
# Hardening round 5 (issue 56): a checkpoint folder never runs code, never passes for a model it
# does not hold, and a config that would build something huge or odd is one line before anything is
# built; ``--set pretrained=`` refuses what ``--model`` refuses, before any case runs.


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


@pytest.mark.filterwarnings("ignore")
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


@pytest.mark.filterwarnings("ignore")
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


@pytest.mark.filterwarnings("ignore")
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
@pytest.mark.filterwarnings("ignore")
def test_config_is_checked_before_anything_is_built(folder, config, words):
    if isinstance(config, dict):
        _edit_json(folder / "config.json", **config)
    else:
        (folder / "config.json").write_text(json.dumps(config))
    _refusal(folder, words)


@pytest.mark.filterwarnings("ignore")
def test_a_tokenizer_larger_than_the_vocabulary_is_one_line(folder):
    _edit_json(folder / "config.json", vocab_size=200)
    from safetensors.torch import load_file, save_file

    weights = {k: (v[:200] if v.shape[0] == 300 else v) for k, v in load_file(folder / "model.safetensors").items()}
    save_file(weights, folder / "model.safetensors")
    _refusal(folder, r"the tokenizer has 300 tokens but the model's vocabulary is 200")


@pytest.mark.filterwarnings("ignore")
def test_a_fifo_in_the_folder_is_one_line(folder):
    (folder / "tokenizer.json").unlink()
    import os

    os.mkfifo(folder / "tokenizer.json")
    _refusal(folder, "tokenizer.json is a FIFO; allowed: a regular file")


@pytest.mark.filterwarnings("ignore")
@pytest.mark.subprocess  # the CLI reads the method files in a child process
def test_set_pretrained_refuses_what_model_refuses_before_any_case(folder, tmp_path, capsys):
    base = ["--suite", "extrapolation", "--profile", "cpu", "--results", str(tmp_path / "r")]
    code, out, err = _run(base + ["--set", f"pretrained=hf:{tmp_path}/none"], capsys)
    assert code == cli.EXIT_USAGE and "no such folder" in err and err.count("\n") == 1
    _edit_json(folder / "config.json", model_type="gpt2")
    code, out, err = _run(base + ["--set", f"pretrained=hf:{folder}", "--dry-run"], capsys)
    assert code == cli.EXIT_USAGE and "model_type 'gpt2' is not supported" in err and out == ""
    assert not (tmp_path / "r").exists()


@pytest.mark.filterwarnings("ignore")
@pytest.mark.subprocess  # the CLI reads the method files in a child process
def test_settings_a_checkpoint_ignores_are_refused(checkpoints, capsys):
    for setting in ["model_overrides.window=1", "model_overrides.n_kv_heads=1", "model=small"]:
        argv = ["--suite", "extrapolation", "--profile", "cpu", "--model", f"hf:{checkpoints['llama']}", "--set", setting]
        code, out, err = _run(argv + ["--dry-run"], capsys)
        assert code == cli.EXIT_USAGE and out == "" and err.count("\n") == 1
        assert f"--set {setting.split('=')[0]}: a checkpoint" in err and "would not apply" in err


@pytest.mark.filterwarnings("ignore")
@pytest.mark.subprocess  # the CLI reads the method files in a child process
def test_a_model_folder_named_with_an_emoji_is_read_as_a_path(checkpoints, tmp_path, capsys):
    folder = shutil.copytree(checkpoints["llama"], tmp_path / "ckpt \U0001f600")
    code, out, err = _run(["--suite", "extrapolation", "--profile", "cpu", "--model", f"hf:{folder}", "--dry-run"], capsys)
    assert code == 0, err
    assert json.loads(out.splitlines()[1].removeprefix("settings: "))["pretrained"] == f"hf:{folder.resolve()}"


@pytest.mark.filterwarnings("ignore")
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


# --------------------------------------------------------------------------------------------------
# Hardening round 6 (issue 67): every file a shard index names is a regular file in the folder
# (checked before transformers opens it, whatever its suffix), JSON nesting is bounded before any
# recursion, and a weight of the wrong shape or dtype is one line naming it, what the model expects
# and what the file holds.


def _shard(folder, second: str) -> None:
    """Split ``folder``'s model.safetensors into two shards and an index naming them; the second
    is called ``second`` (save_pretrained's names end in .safetensors, an index may name anything)."""
    from safetensors.torch import load_file, save_file

    weights = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    keys = sorted(weights)
    halves = {"model-00001-of-00002.safetensors": keys[::2], second: keys[1::2]}
    for name, part in halves.items():
        save_file({k: weights[k] for k in part}, folder / name, metadata={"format": "pt"})
    weight_map = {k: name for name, part in halves.items() for k in part}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def _refusal_unblocked(folder, match: str, fifo) -> str:
    """``_refusal`` watched by a process that opens ``fifo`` for writing after 8 s: a load blocked
    on it (safetensors' open holds the GIL, so no thread can time it out) is released and fails
    the test instead of hanging it. The watchdog's own open blocks while no reader waits."""
    watchdog = subprocess.Popen(["sh", "-c", 'sleep 8 && exec 3>"$0"', str(fifo)])
    try:
        with pytest.raises(Exception) as info:
            load(f"hf:{folder}", torch.float32, "cpu")
        assert watchdog.poll() is None, f"the load blocked on the FIFO {fifo.name} until the watchdog opened it"
    finally:
        watchdog.kill()
        watchdog.wait()
    assert isinstance(info.value, CheckpointError) and "\n" not in str(info.value), info.value
    assert re.search(match, str(info.value)), str(info.value)
    return str(info.value)


@pytest.mark.filterwarnings("ignore")
def test_a_sharded_folder_loads_whatever_its_shards_are_called(folder):
    _shard(folder, "second-part.dat")
    assert load(f"hf:{folder}", torch.float32, "cpu").vocab_size == 300


@pytest.mark.filterwarnings("ignore")
@pytest.mark.subprocess  # a watchdog process releases a load blocked on the FIFO
@pytest.mark.parametrize("name", ["second-part.dat", "second.safetensors"])
def test_a_fifo_named_as_a_shard_is_one_line_never_a_hang(folder, name):
    import os

    _shard(folder, name)
    (folder / name).unlink()
    os.mkfifo(folder / name)
    _refusal_unblocked(
        folder, f"model.safetensors.index.json names {name}, which is a FIFO; allowed: a regular file", folder / name
    )


@pytest.mark.filterwarnings("ignore")
def test_a_shard_index_names_only_regular_files_in_the_folder(folder, tmp_path):
    import os

    _shard(folder, "second-part.dat")
    (folder / "second-part.dat").rename(tmp_path / "outside.dat")
    _refusal(folder, "names second-part.dat, which is not in the folder; allowed: a regular file")
    os.symlink(tmp_path / "outside.dat", folder / "second-part.dat")
    _refusal(folder, "names second-part.dat, which is a link out of the folder; allowed: a regular file in the folder")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    for outside in [str(tmp_path / "outside.dat"), "../outside.dat", "sub/x.dat", ""]:
        index["weight_map"]["model.norm.weight"] = outside
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
        _refusal(folder, r"model.safetensors.index.json names the shard .*; allowed: a file name in the folder")
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": [1]}))
    _refusal(folder, "model.safetensors.index.json is not a shard index; allowed: a JSON object whose weight_map maps")


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", ["config.json", "tokenizer_config.json", "model.safetensors.index.json"])
def test_json_nested_500_deep_is_one_line(folder, name):
    if name.endswith("index.json"):
        _shard(folder, "second.safetensors")
    data = json.loads((folder / name).read_text())
    deep = 1
    for _ in range(500):
        deep = [deep] if len(str(_)) % 2 else {"a": deep}
    data["extra"] = deep
    (folder / name).write_text(json.dumps(data))
    _refusal(folder, f"{name} nests JSON deeper than 64 levels; allowed: at most 64")


def test_json_depth_is_scanned_without_recursion():
    from posbench.hf.folder_check import json_depth

    assert json_depth('{"a": "[[[{{{", "b": [1, {"c": "]]\\"[["}]}') == 3  # brackets in strings do not count
    assert json_depth("[" * 1_000_000 + "]" * 1_000_000) == 1_000_000
    assert json_depth("3") == 0


def _relabel(path, key: str, dtype: str, shape: list) -> None:
    """Rewrite one entry of a safetensors header (the bytes stay): what a hostile edit does."""
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    header[key].update(dtype=dtype, shape=shape)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + data[8 + n :])


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize(
    "dtype, shape, words",
    [
        ("F32", [2, 16], r"expected shape \[32\] of a floating dtype, found shape \[2, 16\] of F32"),
        ("F16", [64], r"expected shape \[32\] of a floating dtype, found shape \[64\] of F16"),
        ("I32", [32], r"expected shape \[32\] of a floating dtype, found shape \[32\] of I32"),
        ("U8", [128], r"expected shape \[32\] of a floating dtype, found shape \[128\] of U8"),
    ],
)
def test_a_relabelled_weight_is_one_line_naming_it(folder, dtype, shape, words):
    _relabel(folder / "model.safetensors", "model.norm.weight", dtype, shape)
    _refusal(folder, rf"model.safetensors: weight model.norm.weight: {words}; allowed: ")


@pytest.mark.filterwarnings("ignore")
def test_a_weight_of_the_wrong_shape_is_one_line_naming_it_in_any_file(folder):
    from safetensors.torch import load_file

    weights = load_file(folder / "model.safetensors")
    weights["model.norm.weight"] = torch.zeros(5)
    (folder / "model.safetensors").unlink()
    torch.save(weights, folder / "pytorch_model.bin")  # read by transformers alone: its report, translated
    _refusal(folder, r"weight model.norm.weight: expected shape \[32\], found shape \[5\]; allowed: ")
