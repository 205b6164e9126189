"""``bench.py --suite extrapolation --model hf:DIR`` on the tiny Llama, BLOOM and MPT folders: the
real path (runner, worker, rows, tables), on a text corpus through each checkpoint's tokenizer."""

import json

import pytest

from posbench.cli import app as cli
from tests.helpers.hf_checkpoints import L_TRAIN, NEEDS_HF, SENTENCES

pytest.importorskip("transformers", reason=NEEDS_HF)

RUNS = {  # family -> (methods, extra settings)
    "llama": ("rotary,rotary_yarn,alibi", []),
    "bloom": ("alibi", ["--set", "interpolate=true", "--set", "method_options={alibi: {bias_dtype: compute}}"]),
    "mpt": ("alibi", ["--set", "interpolate=true"]),
}


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("family", list(RUNS))
def test_extrapolation_suite_runs_on_an_hf_folder(checkpoints, family, tmp_path, capsys):
    text = tmp_path / "corpus.txt"
    text.write_text(" ".join(SENTENCES * 40))
    methods, extra = RUNS[family]
    argv = [
        "--suite",
        "extrapolation",
        "--profile",
        "cpu",
        "--model",
        f"hf:{checkpoints[family]}",
        "--methods",
        methods,
        "--set",
        f"grid.L_train=[{L_TRAIN}]",
        "--set",
        "L_valid_factors=[1, 4]",
        "--set",
        "eval_tokens=300",
        "--set",
        "passkey_trials=2",
        "--set",
        f"corpus={{kind: text, path: {json.dumps(str(text))}}}",
        "--results",
        str(tmp_path / "results"),
        "--quiet",
        *extra,
    ]
    code = cli.main(argv)
    capsys.readouterr()
    (cases,) = (tmp_path / "results" / "extrapolation").glob("*/cases.jsonl")
    rows = {r["method"]: r for r in map(json.loads, cases.read_text().splitlines())}
    assert code == 0
    for method in methods.split(","):
        row = rows[method]
        if family == "llama" and method == "alibi":
            assert row["status"] == "unavailable" and "cannot be applied to a RoPE checkpoint" in row["message"]
            continue
        assert row["status"] == "ok", row["message"]
        m, series = row["metrics"], row["series"]
        for mode in ("nonoverlapping", "sliding"):
            assert m[f"ppl@{mode}@{L_TRAIN}"] > 1 and m[f"ppl@{mode}@{4 * L_TRAIN}"] > 1
        assert m["passkey@64"] in (0.0, 0.5, 1.0) and series["passkey"]["64"]["trials"] == 2
        assert series["corpus"]["kind"] == "text" and series["corpus"]["tokenizer"]
        assert series["checkpoint"]["model_type"] == family and row["info"]["attn_backend"] == "transformers"
        if family == "llama":
            assert series["rope_checks"]["64"]["max_rel_freq_diff"] <= 1e-5
        else:
            assert m[f"ppl@nonoverlapping@{4 * L_TRAIN}@interp"] > 1 and "passkey@64@interp" in m
            assert row["info"]["bias_dtype"] == ("compute" if family == "bloom" else "float32")
