"""The extrapolation, precision and kernels tasks, run in-process on tiny settings."""

import os
import re

import pytest

from posbench import tasks
from posbench.core.registry import TASKS_ENV_PATH, RegistryError
from posbench.core.task import find_metric, known_model_fields
from posbench.run import suite as suitemod
from tests.helpers.cases import TINY, make_case


def test_extrapolation_task_cells_checkpoint_and_reuse(tmp_path):
    task, case = make_case("extrapolation", "alibi", {"L_train": 8}, TINY, tmp_path)
    out = task.run(case)
    evals = out["series"]["evals"]
    # 2 interpolation settings x 2 modes x 2 lengths, every one scored over the same tokens
    assert len(evals) == 8 and {e["status"] for e in evals} == {"ok"}
    assert {(e["mode"], e["L_valid"], e["interpolate"]) for e in evals} == {
        (m, L, i) for m in ("nonoverlapping", "sliding") for L in (8, 16) for i in (False, True)
    }
    assert all(e["tokens"] == 299 for e in evals)
    sliding16 = next(e for e in evals if e["mode"] == "sliding" and e["L_valid"] == 16 and not e["interpolate"])
    assert sliding16["stride"] == 4
    m = out["metrics"]
    assert m["ppl_at_train_len"] == m["ppl@nonoverlapping@8"] and m["ppl_at_max_len"] == m["ppl@nonoverlapping@16"]
    assert m["best_ppl"] is not None and m["best_ppl"] > 1 and m["reused_checkpoint"] == 0
    assert 1 < m["best_ppl_eval"] < 16  # the true source on the 300 evaluated tokens
    assert len(out["series"]["per_position_loss"]["sliding@16@interp"]) == 16
    ckpt = tmp_path / "checkpoints" / "alibi__L_train=8.pt"
    assert ckpt.exists()
    again = task.run(case)  # evaluation re-runs from the checkpoint, without training
    assert again["metrics"]["reused_checkpoint"] == 1
    assert again["metrics"]["ppl@sliding@16"] == pytest.approx(m["ppl@sliding@16"])


def test_extrapolation_settings_need_one_budget(tmp_path):
    with pytest.raises(ValueError, match="exactly one training budget"):
        make_case("extrapolation", "alibi", {"L_train": 8}, {**TINY, "tokens": 1000}, tmp_path)


def test_precision_task_both_studies(tmp_path):
    settings = {
        **TINY,
        "interpolate": False,
        "modes": ["nonoverlapping"],
        "analysis_heads": 8,
        "analysis_length": 8192,
        "analysis_window": 1000,
        "analysis_chart_heads": [0, 7],
    }
    task, case = make_case("precision", "alibi", {"study": "bias_counts", "L_train": 8}, settings, tmp_path)
    out = task.run(case)
    assert out["metrics"]["last_window_distinct@float32"] == 192  # the partial last window
    assert out["metrics"]["last_window_distinct@bfloat16"] < out["metrics"]["last_window_distinct@float16"] < 192
    assert (tmp_path / "precision" / "tables.md").exists()
    assert (tmp_path / "precision" / "alibi_staircase_head7.png").exists()
    task, case = make_case("precision", "alibi", {"study": "bias_dtype_ppl", "L_train": 8}, settings, tmp_path)
    m = task.run(case)["metrics"]
    for L in (8, 16):
        assert m[f"ppl_diff@{L}"] == pytest.approx(m[f"ppl@compute_bias@{L}"] - m[f"ppl@float32_bias@{L}"])
    assert m["ppl_diff_at_max_len"] == m["ppl_diff@16"]


def test_kernels_task_variants_and_availability(tmp_path):
    settings = {"batch": 1, "heads": 2, "dtype": "float32", "warmup": 0, "reps": 2}
    task, case = make_case("kernels", "sdpa_causal", {"seq_len": 32, "head_dim": 32}, settings, tmp_path)
    assert task.unavailable(case) is None
    m = task.run(case)["metrics"]
    assert m["fwd_ms"] > 0 and m["fwdbwd_tflops"] > 0
    assert m["predicted_bias_bytes"] == 1 * 2 * 32 * 32 * 4
    _, triton_case = make_case("kernels", "alibi_triton", {"seq_len": 32, "head_dim": 32}, settings, tmp_path)
    assert "CUDA" in task.unavailable(triton_case)


def test_kernels_suite_rejects_unknown_variant(tmp_path):
    path = tmp_path / "k.yaml"
    text = (suitemod.SUITES_DIR / "kernels.yaml").read_text().replace("sdpa_causal,", "sdpa_casual,", 1)
    path.write_text(text)
    with pytest.raises(
        suitemod.SuiteError,
        match=r"k.yaml:\d+: methods\[3\]: unknown kernels variant 'sdpa_casual' \(did you mean 'sdpa_causal'\?\)",
    ):
        suitemod.load(str(path))


def test_task_contract_is_checked_on_import(tmp_path, monkeypatch):
    assert tasks.get("kernels").own_methods and tasks.get("kernels").unavailable is not None  # kernel variants
    assert isinstance(tasks.get("_testing"), tasks.Task) and not tasks.get("_testing").own_methods
    assert tasks.get("_testing").unavailable_reason(None) is None  # the default: available
    declare = "from posbench.core.registry import register_task\nfrom posbench.core.task import Task\n"
    packages = {
        "nometrics": "Settings = Params = object\ndef run(case): return {}\n",
        "strmetrics": declare + "TASK = register_task(Task(object, object, {'x': 'a string'}, lambda case: {}, "
        "name='strmetrics'))\n",
        "misnamed": declare + "TASK = register_task(Task(object, object, {}, lambda case: {}, name='other'))\n",
    }
    for name, source in packages.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
        (tmp_path / name / "task.py").write_text(source)
    monkeypatch.setenv(TASKS_ENV_PATH, os.pathsep.join([str(tmp_path), os.environ[TASKS_ENV_PATH]]))
    where = {name: re.escape(str((tmp_path / name).resolve())) for name in packages}
    with pytest.raises(
        RegistryError,
        match=rf"^task 'nometrics' \({where['nometrics']}\) registers no task; a task package's "
        r"task.py declares TASK = register_task\(Task\(Settings, Params, METRICS, run, "
        r"\.\.\., name='nometrics'\)\)$",
    ):
        tasks.get("nometrics")
    with pytest.raises(
        RegistryError,
        match=rf"^error importing task package {where['strmetrics']}: task 'strmetrics': "
        r"METRICS\['x'\] is not a posbench.core.task.Metric$",
    ):
        tasks.get("strmetrics")
    with pytest.raises(
        RegistryError,
        match=rf"^task 'misnamed' \({where['misnamed']}\) registers 'other'; allowed: "
        r"register_task\(Task\(\.\.\., name='misnamed'\)\), the name of its package$",
    ):
        tasks.get("misnamed")
    assert "other" not in tasks.names(include_hidden=True)  # what a failed package registered is gone
    assert tasks.metrics_of("not-a-task") == {}


def test_metrics_are_declared_once_with_families():
    ext = tasks.get("extrapolation").METRICS
    assert find_metric(ext, "ppl@sliding@512@s1") is ext["ppl@*"] and ext["ppl@*"].higher_is_better is False
    assert find_metric(ext, "ppl_at_train_len").fmt == "ppl" and find_metric(ext, "nothing") is None
    eff = tasks.get("efficiency").METRICS
    assert (eff["train_wps"].higher_is_better, eff["train_wps"].fmt, eff["train_wps"].table) == (True, "count", True)
    assert eff["train_wps_min"].higher_is_better is None and eff["peak_mem_train_bytes"].fmt == "bytes"
    for name in tasks.names(include_hidden=True):  # every declaration of every task is a titled Metric
        assert all(isinstance(m, tasks.Metric) and m.title for m in tasks.get(name).METRICS.values())


def test_a_seed_spread_is_declared_with_its_metric_and_never_compared():
    ext = tasks.get("extrapolation").METRICS
    std = find_metric(ext, "ppl@nonoverlapping@64_std")  # not the ppl@* family itself
    assert (std.title, std.fmt, std.higher_is_better) == ("Perplexity, std over seeds", "ppl", None)
    assert find_metric(ext, "ppl_at_max_len_std").unit == "perplexity"
    assert find_metric(ext, "nothing_std") is None and ext["n_seeds"].higher_is_better is None


def test_every_task_with_model_overrides_accepts_only_model_fields():
    from posbench import tasks

    with pytest.raises(ValueError, match=r"unknown ModelConfig field\(s\) n_lyers; allowed: .*n_layers"):
        known_model_fields({"n_lyers": 2})
    assert known_model_fields({"n_layers": 2}) == {"n_layers": 2}
    for name in ("efficiency", "extrapolation", "decode", "retrieval"):
        validators = tasks.get(name).Settings.__pydantic_decorators__.field_validators.values()
        assert any(v.info.fields == ("model_overrides",) and v.func.__name__ == "known_model_fields" for v in validators), name
