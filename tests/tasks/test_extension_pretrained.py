"""The extension task on a Hugging Face checkpoint (``--model hf:DIR``): each family's recipes at
k = 0 and after a k-step fine-tune (the weights move), DroPE and ALiBi interpolation on the
checkpoint, L_train from the config or the setting, recipes of the other family unavailable, the
memory refusal, bad input as one line, and the CLI run of the extension suite on each family."""

import json
import math

import pytest
import torch

from posbench.cli import app as cli
from posbench.core.task import Unavailable
from tests.helpers.cases import make_case
from tests.helpers.hf_checkpoints import NEEDS_HF, SENTENCES, checkpoints  # noqa: F401  (session fixture)

pytest.importorskip("transformers", reason=NEEDS_HF)

from posbench.tasks.extension import pretrained as EP  # noqa: E402  (imports torch; transformers checked above)

L_CONFIG = 32  # the tiny checkpoints' max_position_embeddings / max_seq_len (tests/helpers/hf_checkpoints.py)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "corpus.txt"
    path.write_text(" ".join(SENTENCES * 40))
    return path


def _settings(folder, corpus, **extra) -> dict:
    return {
        "model": "tiny",
        "steps": 1,
        "pretrained": f"hf:{folder}",
        "corpus": {"kind": "text", "path": str(corpus)},
        "target_factor": 2,
        "finetune_steps": [0, 2],
        "finetune_batch_size": 2,
        "finetune_lr": 5e-4,
        "finetune_warmup_steps": 1,
        "L_valid_factors": [1, 2],
        "stride": 32,
        "eval_tokens": 300,
        "eval_batch_size": 8,
        "passkey_trials": 2,
        "precision": "float32",
        **extra,
    }


def _run(checkpoints, corpus, tmp_path, family, method, recipe, bias_dtype="float32", **extra):
    task, case = make_case(
        "extension",
        method,
        {"L_train": 8, "recipe": recipe, "bias_dtype": bias_dtype},
        _settings(checkpoints[family], corpus, **extra),
        tmp_path,
    )
    return task.run(case)


CASES = [
    ("llama", "rotary", "yarn", "float32", {}),
    ("bloom", "alibi", "interpolate", "compute", {"pretrained_L_train": 16}),
    ("mpt", "alibi", "extrapolate", "float32", {}),
]


@pytest.mark.parametrize("family,method,recipe,bias_dtype,extra", CASES, ids=[c[0] for c in CASES])
def test_zero_shot_and_fine_tuned_points_on_each_family(checkpoints, corpus, tmp_path, family, method, recipe, bias_dtype, extra):
    out = _run(checkpoints, corpus, tmp_path, family, method, recipe, bias_dtype, **extra)
    m, series = out["metrics"], out["series"]
    L = extra.get("pretrained_L_train", L_CONFIG)  # BLOOM's config names no length: the setting's
    assert m["L_train"] == L and m["L_target"] == 2 * L and series["L_valid"] == [2 * L, 4 * L]
    assert series["L_train_source"] == (
        "setting pretrained_L_train"
        if family == "bloom"
        else f"config.json {'max_seq_len' if family == 'mpt' else 'max_position_embeddings'}"
    )
    for k in (0, 2):
        for mode in ("nonoverlapping", "sliding"):
            for Lv in series["L_valid"]:
                assert math.isfinite(m[f"ppl@{mode}@{Lv}@k{k}"]) and m[f"ppl@{mode}@{Lv}@k{k}"] > 1
        assert m[f"passkey@{4 * L}@k{k}"] in (0.0, 0.5, 1.0)  # 2 trials; at 2 x 16 the probe does not fit
    # the fine-tune trained the checkpoint's own weights: the same text scores lower after 2 steps
    assert m[f"ppl@nonoverlapping@{2 * L}@k2"] < m[f"ppl@nonoverlapping@{2 * L}@k0"]
    assert math.isfinite(m["finetune_loss@k2"]) and len(series["finetune_loss"]["k2"]) == 2
    assert m["ppl_at_target_k0"] == m[f"ppl@nonoverlapping@{2 * L}@k0"]
    assert m["ppl_at_target"] == m[f"ppl@nonoverlapping@{2 * L}@k2"]
    assert m["ppl_at_max_len"] == m[f"ppl@nonoverlapping@{4 * L}@k2"]
    assert m["finetune_memory_needed_bytes"] == 16 * m["n_params"] and math.isfinite(m["base_ppl_at_train_len"])
    assert out["info"]["model"] == f"hf:{family}" and series["checkpoint"]["model_type"] == family
    assert out["info"]["bias_dtype"] == ("" if family == "llama" else bias_dtype)
    if family == "llama":  # YaRN at the static factor 2, checked against posbench's frequencies
        check = series["rope_checks"]["k2"][str(2 * L)]
        assert check["rope_type"] == "yarn" and check["factor"] == 2.0 and check["max_rel_freq_diff"] <= 1e-5


def test_recipes_of_the_other_family_are_unavailable_with_the_reason(checkpoints, corpus, tmp_path):
    with pytest.raises(
        Unavailable,
        match=r"recipe interpolate \(alibi\) does not apply to a llama checkpoint "
        r"\(rope positions\); its recipes: rotary none, pi",
    ):
        _run(checkpoints, corpus, tmp_path, "llama", "alibi", "interpolate")
    with pytest.raises(
        Unavailable,
        match=r"recipe drope \(rotary\) does not apply to a mpt checkpoint \(alibi "
        r"positions\); its recipes: alibi extrapolate, interpolate",
    ):
        _run(checkpoints, corpus, tmp_path, "mpt", "rotary", "drope")
    with pytest.raises(Unavailable, match="recipe pi is for rotary models"):  # the task's own rule, first
        _run(checkpoints, corpus, tmp_path, "bloom", "alibi", "pi", pretrained_L_train=16)


def _ckpt(checkpoints, family):
    from posbench.hf.checkpoint import load

    return load(f"hf:{checkpoints[family]}", torch.float32, "cpu")


def test_drope_removes_the_rotation_from_a_llama(checkpoints):
    idx = torch.randint(0, 300, (2, 12))
    drope = EP.recipe_lm(_ckpt(checkpoints, "llama"), "drope", 16, 32)
    plain = EP.recipe_lm(_ckpt(checkpoints, "llama"), "none", 16, 32)
    # transformers' own rope with every position 0 rotates by nothing: the reference
    torch.testing.assert_close(drope(idx), plain(idx, torch.zeros(12)), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(drope(idx), plain(idx), rtol=1e-3, atol=1e-4)  # the rotation is gone


@pytest.mark.parametrize("family", ["bloom", "mpt"])
def test_alibi_interpolation_scales_the_checkpoints_positions_by_L_train_over_L_target(checkpoints, family):
    lm = EP.recipe_lm(_ckpt(checkpoints, family), "interpolate", 16, 64)
    idx = torch.randint(0, 100, (1, 12))
    logits = lm(idx)
    assert torch.equal(lm.recipe.pos, torch.arange(12, dtype=torch.float32) / 4)
    torch.testing.assert_close(logits, lm(idx, torch.arange(12, dtype=torch.float32) / 4), rtol=0, atol=0)
    plain = EP.recipe_lm(_ckpt(checkpoints, family), "extrapolate", 16, 64)
    extrapolated = plain(idx)
    assert torch.equal(plain.recipe.pos, torch.arange(12, dtype=torch.float32))
    assert not torch.allclose(extrapolated, logits)


def test_fine_tuning_is_unavailable_where_the_memory_does_not_hold_it(checkpoints, corpus, tmp_path, monkeypatch):
    with pytest.raises(
        Unavailable,
        match=r"fine-tuning needs about .* GiB \([\d,]+ parameters x 16 bytes: float32 "
        r"weights, gradients, AdamW moments.*\) and setting finetune_memory_bytes "
        r"is .* GiB; allowed: finetune_steps \[0\]",
    ):
        _run(checkpoints, corpus, tmp_path, "llama", "rotary", "pi", finetune_memory_bytes=1000)
    # the device's own number, read at the boundary (torch.cuda.mem_get_info, psutil or /proc/meminfo)
    monkeypatch.setattr(EP, "available_memory", lambda device: (4096, "available RAM (test)"))
    with pytest.raises(Unavailable, match=r"and available RAM \(test\) is 3.81e-06 GiB"):
        _run(checkpoints, corpus, tmp_path, "mpt", "alibi", "interpolate")
    out = _run(checkpoints, corpus, tmp_path, "mpt", "alibi", "interpolate", finetune_steps=[0])  # k = 0 needs no check
    assert out["metrics"]["finetune_memory_needed_bytes"] is None and out["metrics"]["ppl_at_target"] > 1


def test_a_checkpoints_rows_are_tabled_at_its_own_L_train():
    from types import SimpleNamespace as Row

    from posbench.tasks.extension.report import checkpoint_lengths

    ok = Row(settings={"pretrained": "hf:/a"}, params={"L_train": 8}, metrics={"L_train": 32})
    off = Row(settings={"pretrained": "hf:/a"}, params={"L_train": 8}, metrics={})  # an unavailable row
    trained = Row(settings={}, params={"L_train": 8}, metrics={"L_target": 32})
    assert checkpoint_lengths([ok, off, trained]) == {("hf:/a", 8): 32}


def test_the_fine_tune_reads_only_the_train_tokens_it_needs(checkpoints, tmp_path, monkeypatch):
    from posbench.hf import text as H
    from posbench.protocols.pretrained_eval import pretrained_tokens

    (tmp_path / "train.txt").write_text("\n".join(SENTENCES * 30) + "\n")
    (tmp_path / "valid.txt").write_text(SENTENCES[0])
    ckpt = _ckpt(checkpoints, "llama")
    whole = H.encode(ckpt.tokenizer, (tmp_path / "train.txt").read_text())
    pieces = []
    monkeypatch.setattr(H, "CHUNK_CHARS", 200)
    real = H.encode
    monkeypatch.setattr(H, "encode", lambda tok, text: pieces.append(len(text)) or real(tok, text))
    s = _settings(checkpoints["llama"], tmp_path)
    s["corpus"] = {"kind": "text", "path": str(tmp_path), "splits": {"train": "train.txt", "valid": "valid.txt"}}
    settings = make_case("extension", "rotary", {"L_train": 8, "recipe": "pi"}, s, tmp_path)[1].settings
    ids, corpus = pretrained_tokens(settings, ckpt, "train", 150)
    assert corpus["train_tokens"] == 150 and ids.tolist() == whole[:150].tolist()  # pieces end at line breaks
    assert 1 < len(pieces) and sum(pieces) < len((tmp_path / "train.txt").read_text()) / 2  # not all of it


def test_available_memory_reads_the_gpu_psutil_or_proc_meminfo(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (123_000, 456_000))
    assert EP.available_memory("cuda:0") == (123_000, "free on cuda:0 (torch.cuda.mem_get_info)")
    monkeypatch.setitem(__import__("sys").modules, "psutil", None)  # psutil absent: /proc/meminfo
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:  2000 kB\nMemFree:  100 kB\nMemAvailable:  1500 kB\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: real_open(meminfo if path == "/proc/meminfo" else path, *a, **k))
    assert EP.available_memory("cpu") == (1500 * 1024, "available RAM (/proc/meminfo MemAvailable)")
    meminfo.unlink()  # nothing says: no refusal
    assert EP.available_memory("cpu") == (None, "unknown")


def test_bad_input_is_one_line(checkpoints, corpus, tmp_path):
    with pytest.raises(
        ValueError,
        match=r"config.json names no training length \(max_position_embeddings or "
        r"max_seq_len\); allowed: set pretrained_L_train=N",
    ):
        _run(checkpoints, corpus, tmp_path, "bloom", "alibi", "extrapolate")  # BLOOM's config names none
    with pytest.raises(ValueError, match="pretrained must be hf:DIR"):
        make_case("extension", "rotary", {"L_train": 8, "recipe": "pi"}, {"pretrained": "owner/name"}, tmp_path)
    with pytest.raises(ValueError, match="greater than or equal to 2"):
        make_case(
            "extension",
            "rotary",
            {"L_train": 8, "recipe": "pi"},
            _settings(checkpoints["llama"], corpus, pretrained_L_train=1),
            tmp_path,
        )
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        make_case(
            "extension",
            "rotary",
            {"L_train": 8, "recipe": "pi"},
            _settings(checkpoints["llama"], corpus, finetune_memory_bytes=-1),
            tmp_path,
        )


RUNS = {  # family -> (methods, recipes, bias dtypes, extra settings)
    "llama": ("rotary,alibi", "[drope, extrapolate]", "[float32]", []),  # a --set grid.L_train: refused (test_checkpoint_hostile)
    "bloom": ("alibi", "[extrapolate]", "[float32, compute]", ["--set", "pretrained_L_train=16"]),
    "mpt": ("alibi", "[interpolate]", "[float32]", []),
}


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("family", list(RUNS))
def test_extension_suite_runs_on_an_hf_folder(checkpoints, corpus, family, tmp_path, capsys):
    methods, recipes, dtypes, extra = RUNS[family]
    argv = [
        "--suite",
        "extension",
        "--profile",
        "cpu",
        "--model",
        f"hf:{checkpoints[family]}",
        "--methods",
        methods,
        "--set",
        f"grid.recipe={recipes}",
        "--set",
        f"grid.bias_dtype={dtypes}",
        "--set",
        "seeds=[0]",
        "--set",
        "target_factor=2",
        "--set",
        "finetune_steps=[0, 2]",
        "--set",
        "finetune_batch_size=2",
        "--set",
        "eval_tokens=300",
        "--set",
        "passkey_trials=2",
        "--set",
        "stride=32",
        "--set",
        f"corpus={{kind: text, path: {json.dumps(str(corpus))}}}",
        "--results",
        str(tmp_path / "res"),
        "--quiet",
        *extra,
    ]
    code = cli.main(argv)
    capsys.readouterr()
    (run,) = (tmp_path / "res" / "extension").glob("*/")
    rows = [json.loads(line) for line in (run / "cases.jsonl").read_text().splitlines()]
    assert code == 0
    L = 16 if family == "bloom" else L_CONFIG
    for row in rows:
        recipe = row["params"]["recipe"]
        if family == "llama" and (recipe == "extrapolate" or row["method"] == "alibi"):
            assert row["status"] == "unavailable" and row["message"], row
            continue
        assert row["status"] == "ok", row["message"]
        m = row["metrics"]
        ks = row["series"]["finetune_steps"]
        assert ks[0] == 0 and ks[-1] > 0 and m["L_train"] == L
        for k in ks:
            assert math.isfinite(m[f"ppl@sliding@{4 * L}@k{k}"]) and m[f"ppl@nonoverlapping@{2 * L}@k{k}"] > 1
        assert m["ppl_at_target"] != m["ppl_at_target_k0"]
    table = (run / "table.md").read_text()
    assert f"L_target {2 * L}, L_train {L}" in table  # the checkpoint's L_train, not the grid's (8 or 32)
    assert "L_train 8" not in table and "L_train 32" not in table.replace(f"L_train {L}", "")
    if family == "llama":  # the unavailable rows join the checkpoint's table, named in its note
        from posbench.report.rows import load_runs
        from posbench.tasks import find as find_task
        from posbench.tasks.extension.report import extension_tables

        tables = extension_tables(load_runs([run], find_task=find_task))
        assert tables and {t.rest["L_train"] for t in tables} == {L}
        assert all(
            t.note.startswith(
                "Unavailable (the recipe does not apply; each row says why): alibi drope, extrapolate; rotary extrapolate."
            )
            for t in tables
        )


@pytest.mark.subprocess  # the CLI reads the method files in a child process
def test_the_extension_suite_refuses_a_hub_id_in_one_line(capsys):
    code = cli.main(["--suite", "extension", "--model", "hf:someone/some-model", "--dry-run"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE and err.strip().count("\n") == 0
    assert "looks like a Hugging Face Hub id" in err and "huggingface-cli download someone/some-model" in err
