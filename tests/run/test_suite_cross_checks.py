"""Checks that need several keys at once, made when a suite is validated (``bench.py validate``,
``run --dry-run``): issue 67's late refusals, each one line naming the key and what is allowed,
where each case's worker used to refuse (an error row per case, exit 3) or decline (unavailable)."""

import pytest

from posbench.cli import app as cli
from posbench.run import suite as suitemod
from posbench.run.suite import SuiteError
from tests.helpers.suites import write_suite


def refusal(suite: str, profile: str, *sets: str, joining=()) -> str:
    loaded = suitemod.load(suite)
    with pytest.raises(SuiteError) as info:
        suitemod.resolve(loaded, profile, suitemod.parse_set(list(sets)), joining)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    "methods, allowed",
    [("[sinusoidal, rotary+gate+ssmax]", "rotary+ssmax+gate"), ("[sinusoidal, rotary+gate+gate]", "rotary+gate")],
)
def test_modifiers_out_of_order_or_twice_in_a_suite(tmp_path, methods, allowed):
    text = suitemod.find("extrapolation").read_text()
    text = text.replace("methods: [sinusoidal, rotary, t5_bias, alibi, alibi_triton, nope]", f"methods: {methods}")
    with pytest.raises(SuiteError) as info:
        suitemod.load(write_suite(tmp_path, text))
    assert f"modifiers compose once each, in the order ssmax, qknorm, sink, gate; allowed: {allowed}" in str(info.value)
    assert ":11: methods[1]: " in str(info.value)


def test_modifiers_out_of_order_joining_a_run():
    with pytest.raises(Exception, match=r"allowed: rotary\+ssmax\+gate$") as info:
        from posbench.run.schedule import with_methods

        with_methods(suitemod.resolve(suitemod.load("extrapolation"), "cpu"), ["rotary+gate+ssmax"])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "sets, key, allowed",
    [
        (["n_needles=6"], "n_needles", "n_needles < n_keys (6)"),
        (["hops=7"], "hops", "n_chains * hops <= n_keys (6)"),
        (["n_chains=7"], "n_chains", "n_chains <= n_symbols (6)"),
        (["n_top=6"], "n_top", "n_top < n_symbols (6)"),
    ],
)
def test_ruler_shapes_beyond_the_alphabets(sets, key, allowed):
    msg = refusal("ruler", "cpu", *sets)
    assert msg.startswith(f"--set {key}: {key}: ") and msg.endswith(f"; allowed: {allowed}")


def test_ruler_shapes_of_a_probe_not_in_use_pass():
    # n_needles only matters to multikey: a suite without it may leave it beyond n_keys
    suitemod.resolve(suitemod.load("ruler"), "cpu", suitemod.parse_set(["n_needles=6", "grid.probe=[vartrack]"]))


def test_ruler_shapes_of_a_trained_probe_are_checked():
    # one model for every probe (model_per_probe false): the training mix draws train_probes too
    msg = refusal("retrieval", "default", "train_probes=[passkey, multikey]", "n_needles=16")
    assert msg.startswith("--set n_needles: n_needles: ") and msg.endswith("; allowed: n_needles < n_keys (16)")


@pytest.mark.parametrize("suite", ["extrapolation", "retrieval", "extension"])
def test_an_L_valid_factor_below_one(suite):
    msg = refusal(suite, "cpu", "L_valid_factors=[1, 0]")
    assert msg.startswith("--set L_valid_factors: L_valid_factors[1]: ") and msg.endswith("; allowed: >= 1")


@pytest.mark.parametrize(
    "option, problem",
    [
        ("copy_prob: 1.5", "copy_prob 1.5"),
        ("max_distance: 0", "max_distance 0"),
        ("distance: gaussian", "distance 'gaussian'"),
        ("order: 2", "unknown option 'order'"),
        ("jump: 0", "jump 0"),
    ],
)
def test_synthetic_copy_options(option, problem):
    msg = refusal("dependency", "cpu", f"corpus={{kind: synthetic-copy, synthetic: {{{option}}}}}")
    assert msg.startswith("--set corpus: corpus.synthetic: synthetic-copy: ") and problem in msg and "; allowed: " in msg


def test_synthetic_copy_options_in_the_file_point_at_its_line(tmp_path):
    text = suitemod.find("dependency").read_text().replace("copy_prob: 0.5", "copy_prob: 1.5")
    with pytest.raises(SuiteError) as info:
        suitemod.load(write_suite(tmp_path, text))
    assert ":21: settings.corpus.synthetic: synthetic-copy: copy_prob 1.5" in str(info.value)


@pytest.mark.parametrize("method", ["swan", "irope+gate"])
def test_a_model_window_beside_a_recipe(method):
    msg = refusal("extrapolation", "default", "model_overrides.window=8", joining=[method])
    assert msg == (
        f"--set model_overrides.window: model_overrides.window: {method} sets its own sliding window "
        f"(a recipe: its option window); allowed: no model window with {method}, or leave {method} out"
    )


@pytest.mark.subprocess  # the dry run lists the methods in a child process
def test_a_model_window_beside_a_recipe_in_a_dry_run_is_exit_2(tmp_path, capsys):
    code = cli.main(
        ["run", "--dry-run", "--suite", "extrapolation", "--profile", "default", "--device", "cpu", "--results", str(tmp_path)]
        + ["--methods", "swan", "--set", "model_overrides.window=8"]
    )
    assert code == cli.EXIT_USAGE == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "swan sets its own sliding window" in err
    assert not (tmp_path / "extrapolation").exists()


def test_a_model_window_beside_a_suite_of_recipes_in_the_file_points_at_its_line(tmp_path):
    # a profile whose every method is a recipe: nothing of it would run with the model window
    text = (
        suitemod.find("extrapolation")
        .read_text()
        .replace("      model: tiny\n", "      model: tiny\n      model_overrides: {window: 8}\n", 1)
        .replace(
            "methods: [sinusoidal, rotary, t5_bias, alibi, alibi_triton, nope, fope, pope, stickbreaking, path, path_fox, ",
            "methods: [",
            1,
        )
    )
    assert "    methods: [rnope_swa, swan, irope]\n" in text
    with pytest.raises(SuiteError) as info:
        suitemod.load(write_suite(tmp_path, text))
    assert str(info.value).endswith(
        ":39: profiles.cpu.settings.model_overrides.window: rnope_swa sets its own sliding window (a recipe: its option "
        "window); allowed: no model window with rnope_swa, or leave rnope_swa out"
    )


def test_a_model_window_for_a_profile_listing_recipes_beside_others_is_taken():
    # extrapolation's cpu profile lists the recipes beside eleven other methods: a model window asked
    # for them all is taken, and the recipes' own cases decline it (an ``unavailable`` row each)
    suite = suitemod.resolve(suitemod.load("extrapolation"), "cpu", suitemod.parse_set(["model_overrides.window=8"]), ())
    assert suite.settings.model_overrides["window"] == 8 and "swan" in suite.methods
