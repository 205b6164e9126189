"""SambaNova's test: ALiBi interpolate against extrapolate, paired by seed, with a verdict only
beyond the seed spread; the extension suite's sambanova profile on the dependency suite's corpus,
and a tiny run of its two cases through the report's table."""

import pytest

from posbench.report.rows import load_runs
from posbench.report.stats import seed_interval
from posbench.run import suite as suitemod
from posbench.tasks import find as find_task
from posbench.tasks.extension import interpolation_verdict as V
from posbench.tasks.extension import report as T
from tests.helpers.cases import make_case
from tests.helpers.report_rows import base_row, write_run

NEAR, FAR = "ppl@nonoverlapping@64@k0", "ppl@nonoverlapping@128@k20"


def _row(recipe, by_seed: dict, dtype="float32"):
    row = base_row("extension", "extension", "alibi", {"L_train": 16, "recipe": recipe, "bias_dtype": dtype}, "run-s")
    row["metrics"] = {k: sum(v) / len(v) for k, v in by_seed.items()} | {"n_seeds": 3}
    row["metrics"] |= {f"{k}_std": seed_interval(v)[1] for k, v in by_seed.items()}
    row["series"] = {f"{k}_by_seed": v for k, v in by_seed.items()}
    return row


def test_a_recipe_wins_only_beyond_the_seed_spread(tmp_path):
    rows = [
        # far: interpolation lower by about 1 in every seed; near: the seeds disagree
        _row("extrapolate", {NEAR: [5.0, 6.0, 5.5], FAR: [9.0, 9.5, 10.0]}),
        _row("interpolate", {NEAR: [5.5, 5.4, 5.6], FAR: [8.0, 8.4, 9.1]}),
        _row("extrapolate", {NEAR: [5.0, 5.0, 5.0], FAR: [9.0, 9.0, 9.0]}, dtype="compute"),  # no partner: no table
    ]
    runs = load_runs([write_run(tmp_path / "runs", rows)], find_task=find_task)
    (t,) = V.verdict_tables(runs)
    assert t.rows == ["ppl nonoverlapping, L_valid 64, k=0", "ppl nonoverlapping, L_valid 128, k=20"]
    assert t.extra["verdicts"] == {NEAR: V.NOT_SEPARABLE, FAR: "interpolate better"}
    mean, _, _, lo, hi = seed_interval([-1.0, -1.1, -0.9])
    assert t.cell(t.rows[1], "interpolate - extrapolate").text == f"{mean:+.3f} [{lo:+.3f}, {hi:+.3f}]"
    assert t.cell(t.rows[1], "extrapolate").value == pytest.approx(9.5) and "bias float32" in t.title
    assert "beyond the seed spread" in t.caption and "3 seed(s)" in t.caption
    assert any(x.key == t.key for x in T.summary_tables(runs))  # the run's summary prints it
    (section,) = T.report_sections(runs)
    assert section.blocks[-1].table.key == t.key  # the report shows it after the recipe tables


def test_the_verdict_rule():
    assert V.verdict(-0.5, -0.1) == "interpolate better" and V.verdict(0.1, 0.4) == "extrapolate better"
    assert V.verdict(-0.1, 0.2) == V.NOT_SEPARABLE and V.verdict(None, None) == V.ONE_SEED


def test_the_sambanova_profile_runs_alibi_on_the_dependency_suites_long_copy_corpus():
    profile = suitemod.resolve(suitemod.load("extension"), "sambanova")
    dependency = suitemod.resolve(suitemod.load("dependency"), "cpu")
    assert profile.methods == ["alibi"] and profile.grid["recipe"] == ["extrapolate", "interpolate"]
    assert profile.settings.corpus == dependency.settings.corpus  # copies up to 1024 back, log-uniform
    assert profile.settings.seeds == [0, 1, 2] and profile.grid["L_train"] == dependency.grid["L_train"]
    assert profile.settings.steps == dependency.settings.steps and profile.settings.mix == 0.0
    description = suitemod.load("extension").file.profiles["sambanova"].description
    assert "2-core AMD EPYC" in description and "7:54" in description  # measured, with its machine


TINY = {
    "model": "tiny",
    "model_overrides": {"n_layers": 1, "d_model": 32, "n_heads": 2, "d_ff": 64},
    "corpus": {
        "kind": "synthetic-copy",
        "size": 20000,
        "synthetic": {"vocab": 32, "max_distance": 64, "distance": "log-uniform"},
    },
    "steps": 4,
    "batch_size": 4,
    "warmup_steps": 1,
    "mix": 0.0,
    "seeds": [0, 1],
    "target_factor": 2,
    "finetune_steps": [0, 2],
    "finetune_batch_size": 2,
    "L_valid_factors": [1, 2],
    "modes": ["nonoverlapping"],
    "eval_tokens": 300,
    "eval_batch_size": 8,
    "eval_samples": 4,
    "n_symbols": 8,
    "key_len": 3,
    "depths": [0.0, 1.0],
}


def test_a_tiny_run_of_both_recipes_gives_a_verdict_per_measure(tmp_path):
    rows = []
    for recipe in V.RECIPES:
        task, case = make_case("extension", "alibi", {"L_train": 16, "recipe": recipe}, TINY, tmp_path)
        out = task.run(case)
        row = base_row("extension", "extension", "alibi", {"L_train": 16, "recipe": recipe, "bias_dtype": "float32"}, "r")
        row.update(metrics=out["metrics"], series=out["series"])
        rows.append(row)
    assert rows[1]["metrics"]["reused_checkpoint"] == 1  # one base model per seed serves both recipes
    (t,) = V.verdict_tables(load_runs([write_run(tmp_path / "runs", rows)], find_task=find_task))
    assert len(t.rows) == 4  # L_valid 32 and 64, k 0 and 2
    for key, said in t.extra["verdicts"].items():
        a, b = rows[0]["series"][f"{key}_by_seed"], rows[1]["series"][f"{key}_by_seed"]
        _, _, n, lo, hi = seed_interval([y - x for x, y in zip(a, b)])
        assert n == 2 and said == V.verdict(lo, hi)
