"""The extension task: each recipe's model (ALiBi interpolation scales positions by L_train /
L_target, drope removes the rotation, each rotary recipe sets its scaling and keeps it while
fine-tuning), the unavailable reasons, bad settings as one line, a tiny case end to end (base model
shared by the recipes, fine-tunes with a fresh optimizer) and its report tables and charts."""

from __future__ import annotations

import math

import pytest
import torch

from posbench.core.model import TransformerLM, build_model, model_config
from posbench.core.task import Unavailable
from posbench.run import suite as suitemod
from posbench.tasks import find as find_task
from posbench.tasks.extension import finetune as F
from posbench.tasks.extension import regimes as R
from posbench.tasks.extension import report as T
from tests.helpers.cases import make_case

L_TRAIN, L_TARGET = 16, 64
TINY = {
    "model": "tiny",
    "model_overrides": {"n_layers": 1, "d_model": 32, "n_heads": 2, "d_ff": 64},
    "corpus": {"kind": "synthetic", "synthetic": {"vocab": 16, "order": 1, "branching": 2, "jump": 0.05}, "size": 20000},
    "steps": 4,
    "batch_size": 4,
    "warmup_steps": 1,
    "target_factor": 2,
    "finetune_steps": [0, 3],
    "finetune_batch_size": 2,
    "L_valid_factors": [1, 2],
    "stride": 8,
    "eval_tokens": 300,
    "eval_batch_size": 8,
    "eval_samples": 6,
    "n_symbols": 8,
    "key_len": 3,
    "depths": [0.0, 1.0],
}


def _base(method: str, seed: int = 0) -> TransformerLM:
    torch.manual_seed(seed)
    return build_model(model_config("tiny", method, vocab_size=32, n_layers=2, d_model=32, n_heads=2, d_ff=64)).eval()


def _same_weights(a: TransformerLM, b: TransformerLM) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return all(torch.equal(sa[k], sb[k]) for k in sa if not k.startswith("method."))


def test_alibi_interpolation_scales_positions_by_L_train_over_L_target():
    base = _base("alibi")
    model = R.recipe_model(base, "interpolate", L_TRAIN, L_TARGET)
    assert _same_weights(base, model) and model.method.bias_dtype == "float32"
    assert torch.equal(model.positions(0, 8, "cpu"), torch.arange(8, dtype=torch.float32) * 0.25)
    idx = torch.randint(0, 32, (2, 24))
    explicit = base(idx, pos=torch.arange(24, dtype=torch.float32) * L_TRAIN / L_TARGET)
    torch.testing.assert_close(model(idx), explicit, rtol=0, atol=0)
    # the KV cache decodes at the same scaled positions as the full forward
    cache = model.new_cache()
    steps = torch.cat([model(idx[:, :20], cache=cache)] + [model(idx[:, t : t + 1], cache=cache) for t in range(20, 24)], 1)
    torch.testing.assert_close(steps, explicit, rtol=1e-5, atol=1e-5)
    plain = R.recipe_model(base, "extrapolate", L_TRAIN, L_TARGET, bias_dtype="compute")
    assert plain.method.bias_dtype == "compute" and torch.equal(plain.positions(0, 4, "cpu"), torch.arange(4))
    torch.testing.assert_close(plain(idx), base(idx), rtol=0, atol=0)  # float32 compute: the same bias


def test_drope_removes_the_rotation():
    base = _base("rotary")
    model = R.recipe_model(base, "drope", L_TRAIN, L_TARGET)
    assert model.cfg.method == "nope" and _same_weights(base, model)
    torch.manual_seed(1)
    nope = build_model(model_config("tiny", "nope", vocab_size=32, n_layers=2, d_model=32, n_heads=2, d_ff=64))
    nope.load_state_dict(model.state_dict())
    idx = torch.randint(0, 32, (2, 20))
    torch.testing.assert_close(model(idx), nope.eval()(idx), rtol=0, atol=0)
    assert not torch.allclose(model(idx), base(idx))  # the rotation is gone


@pytest.mark.parametrize("recipe", ["pi", "ntk", "yarn", "longrope", "llama3"])
def test_each_rotary_recipe_sets_its_scaling_and_keeps_it_while_fine_tuning(recipe):
    base = _base("rotary")
    model = R.recipe_model(base, recipe, L_TRAIN, L_TARGET)
    m = model.method
    assert model.cfg.method == R.SCALED_METHOD[recipe] == f"rotary_{recipe}" and _same_weights(base, model)
    assert m.factor == L_TARGET / L_TRAIN == 4.0 and m.known_train_len() == L_TRAIN
    theta, _ = m.frequencies(L_TARGET)
    plain = base.method.base_inv_freq()
    if recipe == "pi":
        torch.testing.assert_close(theta, plain / 4)
    elif recipe == "ntk":
        hd = base.cfg.head_dim
        torch.testing.assert_close(theta, (10000.0 * 4 ** (hd / (hd - 2))) ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    assert theta[-1] < plain[-1]  # every recipe interpolates the lowest frequency
    idx = torch.randint(0, 32, (2, L_TARGET))
    evaluated = model(idx)
    model.train()  # fine-tuning: the model trains, its method still scales
    assert model.training and not m.training
    torch.testing.assert_close(model(idx), evaluated, rtol=0, atol=0)
    assert not torch.allclose(evaluated, base(idx))


def test_none_keeps_the_model():
    base = _base("rotary")
    model = R.recipe_model(base, "none", L_TRAIN, L_TARGET)
    assert model.cfg == base.cfg and _same_weights(base, model)


def test_unavailable_reasons():
    assert R.unavailable("rotary", "pi", "float32") is None and R.unavailable("alibi", "interpolate", "compute") is None
    assert R.unavailable("alibi", "pi", "float32") == (
        "recipe pi is for rotary models; alibi's recipes: extrapolate, interpolate"
    )
    assert R.unavailable("rotary", "interpolate", "float32").startswith("recipe interpolate is for alibi models")
    assert "rotary adds no bias" in R.unavailable("rotary", "none", "compute")
    assert "not sinusoidal; allowed methods: rotary, alibi" in R.unavailable("sinusoidal", "none", "float32")


def test_a_recipe_that_does_not_apply_is_unavailable(tmp_path):
    task, case = make_case("extension", "alibi", {"L_train": L_TRAIN, "recipe": "yarn"}, TINY, tmp_path)
    with pytest.raises(Unavailable, match="recipe yarn is for rotary models"):
        task.run(case)


def test_bad_settings_are_one_line(tmp_path):
    for bad, match in (
        ({"finetune_steps": [10, 40]}, "including 0 \\(the zero-shot point\\)"),
        ({"finetune_steps": [0, 5, 5]}, "must be distinct"),
        ({"target_factor": 1}, "target_factor"),
        ({"depths": [1.5]}, "depths must lie in \\[0, 1\\]"),
    ):
        with pytest.raises(ValueError, match=match) as err:
            make_case("extension", "rotary", {"L_train": L_TRAIN, "recipe": "pi"}, {**TINY, **bad}, tmp_path)
        assert len([line for line in str(err.value).splitlines() if match.split(" ")[0] in line]) == 1
    with pytest.raises(ValueError, match="recipe"):
        make_case("extension", "rotary", {"L_train": L_TRAIN, "recipe": "yarm"}, TINY, tmp_path)
    _, case = make_case("extension", "rotary", {"L_train": 4, "recipe": "pi"}, TINY, tmp_path)
    with pytest.raises(ValueError, match="L_train 4 is too short for the passkey probe"):
        F.run_case(case)


def test_fine_tune_warm_up_and_batch():
    _, s = (
        None,
        make_case(
            "extension",
            "rotary",
            {"L_train": L_TRAIN, "recipe": "pi"},
            {**TINY, "finetune_batch_size": None, "batch_size": 8},
            "/tmp",
        )[1].settings,
    )
    assert [F.warmup_steps(k, s) for k in (0, 3, 30, 1000)] == [0, 1, 3, 20]
    assert F.finetune_batch_size(s) == 4  # the base's tokens per step at L_target = 2 x L_train


def _run(tmp_path, method, recipe, **extra):
    task, case = make_case("extension", method, {"L_train": L_TRAIN, "recipe": recipe, **extra}, TINY, tmp_path)
    return task.run(case)


def test_tiny_case_end_to_end(tmp_path):
    out = _run(tmp_path, "rotary", "pi")
    m, series = out["metrics"], out["series"]
    assert m["reused_checkpoint"] == 0 and m["train_steps"] == 4 and m["L_target"] == 32
    for k in (0, 3):
        for Lv in (32, 64):
            assert math.isfinite(m[f"ppl@nonoverlapping@{Lv}@k{k}"]) and math.isfinite(m[f"ppl@sliding@{Lv}@k{k}"])
            assert 0.0 <= m[f"passkey@{Lv}@k{k}"] <= 1.0
    assert m["ppl_at_target_k0"] == m["ppl@nonoverlapping@32@k0"] and m["ppl_at_target"] == m["ppl@nonoverlapping@32@k3"]
    assert m["ppl_at_max_len"] == m["ppl@nonoverlapping@64@k3"] and m["ppl_at_target"] != m["ppl_at_target_k0"]
    assert "finetune_seconds@k0" not in m and m["finetune_seconds@k3"] > 0 and math.isfinite(m["finetune_loss@k3"])
    assert [s for s, _ in series["finetune_loss"]["k3"]] == [0, 2]  # the fine-tune's own 3 steps
    assert series["finetune_steps"] == [0, 3] and series["L_valid"] == [32, 64]
    assert math.isfinite(m["base_ppl_at_train_len"]) and 0 <= m["base_passkey_at_train_len"] <= 1
    # the other recipes of the method reuse its base model; the zero-shot point of none is the base model's
    again = _run(tmp_path, "rotary", "none")["metrics"]
    assert again["reused_checkpoint"] == 1 and again["base_ppl_at_train_len"] == m["base_ppl_at_train_len"]
    alibi = _run(tmp_path, "alibi", "interpolate", bias_dtype="compute")["metrics"]
    assert alibi["reused_checkpoint"] == 0 and math.isfinite(alibi["ppl_at_target"])


def test_report_draws_quality_against_fine_tuning_steps(tmp_path):
    from posbench.report.build import build_report
    from posbench.report.rows import load_runs
    from tests.helpers.report_rows import base_row, write_run

    rows = []
    for method, recipe, ppl in (
        ("rotary", "none", [9.0, 5.0]),
        ("rotary", "pi", [7.0, 4.0]),
        ("alibi", "interpolate", [6.0, 3.5]),
    ):
        row = base_row("extension", "extension", method, {"L_train": 16, "recipe": recipe, "bias_dtype": "float32"}, "run-e")
        row["metrics"] = {
            "L_target": 64,
            "base_ppl_at_train_len": 3.0,
            "base_passkey_at_train_len": 0.25,
            **{f"ppl@nonoverlapping@{Lv}@k{k}": p * Lv / 64 for k, p in zip((0, 20), ppl) for Lv in (64, 128)},
            **{f"passkey@{Lv}@k{k}": 0.5 for k in (0, 20) for Lv in (64, 128)},
        }
        row["series"] = {"finetune_steps": [0, 20], "L_valid": [64, 128], "modes": ["nonoverlapping"]}
        rows.append(row)
    gone = base_row("extension", "extension", "alibi", {"L_train": 16, "recipe": "pi", "bias_dtype": "float32"}, "run-e")
    gone.update(status="unavailable", message="recipe pi is for rotary models")
    gone_too = base_row("extension", "extension", "rotary", {"L_train": 16, "recipe": "none", "bias_dtype": "compute"}, "run-e")
    gone_too.update(status="unavailable", message="bias_dtype compute: rotary adds no bias")
    rows[0]["metrics"]["L_target"] = 64.0  # a mean over seeds
    folder = write_run(tmp_path / "runs", rows + [gone, gone_too], baseline="rotary", metrics=["ppl_at_target"])
    tables = T.extension_tables(load_runs([folder], find_task=find_task))
    assert [t.metric for t in tables] == ["ppl@nonoverlapping@64", "ppl@nonoverlapping@128", "passkey@64", "passkey@128"]
    ppl = tables[0]
    assert ppl.columns == [0, 20] and ppl.rows == ["rotary none", "rotary pi", "alibi interpolate, bias float32"]
    assert ppl.cell("rotary pi", 0).value == 7.0 and ppl.cell("rotary pi", 20).text == "4.00"
    assert ppl.note == "Unavailable (the recipe does not apply; each row says why): alibi pi; rotary none with bias compute."
    assert "zero-shot" in ppl.caption and "L_target = 64 (" in ppl.caption and "L_target 64," in ppl.title
    assert "own perplexity at L_train: rotary 3.00, alibi 3.00" in ppl.caption
    assert "own passkey accuracy at L_train: rotary 25%, alibi 25%" in tables[2].caption
    build_report([folder], tmp_path / "report", find_task=find_task)
    md = (tmp_path / "report" / "report.md").read_text()
    assert "Context extension" in md and "k (fine-tuning steps)" in md
    assert any(p.name.startswith(ppl.key) for p in (tmp_path / "report").rglob("*.png"))


def test_suite_profiles():
    loaded = suitemod.load("extension")
    cpu = suitemod.resolve(loaded, "cpu")
    assert cpu.task_name == "extension" and cpu.methods == ["rotary", "alibi"]
    assert set(cpu.grid["recipe"]) == set(R.RECIPES) and cpu.grid["bias_dtype"] == ["float32", "compute"]
    assert 0 in cpu.settings.finetune_steps and cpu.settings.threads == 1
    gpu = suitemod.resolve(loaded, "gpu")
    assert gpu.settings.eval_dtype == "bfloat16" and max(gpu.grid["L_train"]) >= 512


def test_the_base_model_lock_makes_a_second_case_wait(tmp_path):
    import threading
    import time

    ckpt = tmp_path / "checkpoints" / "extension__rotary__L_train=16.pt"
    order = []

    def second():
        with F.exclusive(ckpt):
            order.append("second")

    with F.exclusive(ckpt):
        waiting = threading.Thread(target=second)
        waiting.start()
        time.sleep(0.3)
        order.append("first done")
    waiting.join(5)
    assert order == ["first done", "second"]


def test_seeds_average_and_keep_their_spread(tmp_path):
    task, case = make_case(
        "extension",
        "alibi",
        {"L_train": L_TRAIN, "recipe": "extrapolate"},
        {**TINY, "finetune_steps": [0], "seeds": [0, 1], "modes": ["nonoverlapping"]},
        tmp_path,
    )
    out = task.run(case)
    m, series = out["metrics"], out["series"]
    assert m["n_seeds"] == 2 and len(series["ppl_at_target_by_seed"]) == 2
    assert m["ppl_at_target"] == pytest.approx(sum(series["ppl_at_target_by_seed"]) / 2)
    assert m["ppl_at_target_std"] >= 0 and "ppl@sliding@32@k0" not in m
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("*.pt")) == [
        "extension__alibi__L_train=16@seed0.pt",
        "extension__alibi__L_train=16@seed1.pt",
    ]


@pytest.mark.subprocess
def test_tiny_run_through_the_cli(tmp_path, capsys):
    """`bench.py --suite extension` with both methods and three recipes: rotary's pi and alibi's
    interpolate run, the other pairs are unavailable rows with their reasons, and the run's
    summary prints a recipes x k table."""
    from posbench.cli import app as cli
    from posbench.store.run_rows import read_rows

    sets = [
        "model_overrides={n_layers: 1, d_model: 32, n_heads: 2, d_ff: 64}",
        "steps=3",
        "warmup_steps=1",
        "batch_size=4",
        "eval_samples=4",
        "eval_batch_size=4",
        "finetune_steps=[0, 2]",
        "finetune_batch_size=2",
        "target_factor=2",
        "stride=16",
        "eval_tokens=200",
        "stop_at_acc=null",
        "seeds=null",
        "corpus={kind: synthetic, size: 20000}",
        "grid.L_train=[16]",
        "grid.recipe=[pi, interpolate]",
        "grid.bias_dtype=[float32]",
        "threads=1",
    ]
    argv = ["--suite", "extension", "--profile", "cpu", "--device", "cpu", "--results", str(tmp_path)]
    assert cli.main(argv + [a for s in sets for a in ("--set", s)]) == 0
    assert "k (fine-tuning steps)" in capsys.readouterr().out
    (run_dir,) = (tmp_path / "extension").iterdir()
    rows = {(r["method"], r["params"]["recipe"]): r for r in read_rows(run_dir / "cases.jsonl")}
    assert {k: r["status"] for k, r in rows.items()} == {
        ("rotary", "pi"): "ok",
        ("alibi", "interpolate"): "ok",
        ("rotary", "interpolate"): "unavailable",
        ("alibi", "pi"): "unavailable",
    }
    assert rows["alibi", "pi"]["message"].startswith("recipe pi is for rotary models")
    md = (run_dir / "table.md").read_text()
    assert "| rotary pi |" in md and "| alibi interpolate, bias float32 |" in md
