"""Suite validation: every mistake is one line naming the file, the line, the key and what is allowed."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jsonschema  # a dev dependency (pyproject.toml)
import pytest

from posbench.cli import app as cli
from posbench.core import registry
from posbench.run import suite as suitemod
from posbench.run.suite import SuiteError, loading
from tests.helpers.methods import NEW
from tests.helpers.suites import VALID, efficiency_suite, write_suite


def write(tmp_path, text, name="t.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def error(tmp_path, text) -> str:
    with pytest.raises(SuiteError) as info:
        suitemod.load(write(tmp_path, text))
    message = str(info.value)
    assert "\n" not in message
    return message


def test_valid_suite_resolves_profile_over_settings(tmp_path):
    loaded = suitemod.load(write(tmp_path, VALID))
    base = suitemod.resolve(loaded, "default")
    cpu = suitemod.resolve(loaded, "cpu")
    assert base.grid == {"n": [1, 2]} and base.settings.behaviour == "ok"
    assert cpu.grid == {"n": [3]} and cpu.settings.behaviour == "sleep" and cpu.settings.timeout_s == 30.0
    assert [c.id for c in base.cases("cpu")] == ["sinusoidal/n=1", "alibi/n=1", "sinusoidal/n=2", "alibi/n=2"]


def test_unknown_top_level_key(tmp_path):
    msg = error(tmp_path, VALID + "colour: red\n")
    assert msg.startswith(f"{tmp_path}/t.yaml:18: colour: unknown key; allowed: name, description, version")
    assert "profiles" in msg


def test_unknown_settings_key_lists_task_settings(tmp_path):
    msg = error(tmp_path, VALID.replace("  timeout_s: 30", "  timeout_s: 30\n  warmup: 3"))
    assert (
        ":12: settings.warmup: unknown key; allowed: timeout_s, memory_limit_mb, threads, seed, nproc, flush_denormal, behaviour"
        in msg
    )


def test_wrong_type(tmp_path):
    msg = error(tmp_path, VALID.replace("version: 1", "version: one"))
    assert msg == f"{tmp_path}/t.yaml:3: version: must be a valid integer (got 'one'); allowed: an integer"


def test_strict_types_reject_a_string_number(tmp_path):
    msg = error(tmp_path, VALID.replace("timeout_s: 30", "timeout_s: '30'"))
    assert ":11: settings.timeout_s: must be a valid number (got '30'); allowed: a number" in msg


def test_profile_error_points_at_the_profile_line(tmp_path):
    msg = error(tmp_path, VALID.replace("behaviour: sleep", "behaviour: dance"))
    assert ":15: profiles.cpu.settings.behaviour:" in msg
    assert "allowed: 'ok', 'sleep', 'raise'" in msg


def test_unknown_method_did_you_mean(tmp_path):
    msg = error(tmp_path, VALID.replace("[sinusoidal, alibi]", "[sinusoidal, alibbi]"))
    assert ":5: methods[1]: unknown method 'alibbi' (did you mean 'alibi'?); allowed: " in msg
    assert "rotary" in msg.split("allowed:")[1]


def test_baseline_must_be_a_method(tmp_path):
    msg = error(tmp_path, VALID.replace("baseline: sinusoidal", "baseline: rotary"))
    assert ":6: baseline: 'rotary' is not in methods; allowed: sinusoidal, alibi" in msg


@pytest.mark.parametrize("grid, where", [("grid: {}", ":8: grid:"), ("grid:\n  n: []", ":9: grid.n:")])
def test_empty_grid(tmp_path, grid, where):
    msg = error(tmp_path, VALID.replace("grid:\n  n: [1, 2]", grid))
    assert where in msg and "allowed:" in msg


def test_unknown_grid_axis_and_bad_value(tmp_path):
    assert ":9: grid.m: unknown grid axis; allowed: n" in error(tmp_path, VALID.replace("  n: [1, 2]", "  m: [1, 2]"))
    msg = error(tmp_path, VALID.replace("  n: [1, 2]", "  n: [1, x]"))
    assert ":9: grid.n[1]: must be a valid integer (got 'x'); allowed: an integer" in msg


def test_non_mapping_root(tmp_path):
    msg = error(tmp_path, "- a\n- b\n")
    assert msg.startswith(f"{tmp_path}/t.yaml:1: <root>: the file must be a mapping, got list; allowed: a mapping")


def test_duplicate_key(tmp_path):
    msg = error(tmp_path, VALID.replace("version: 1", "version: 1\nversion: 2"))
    assert msg == f"{tmp_path}/t.yaml:4: version: duplicate key (first at line 3); allowed: each key once per mapping"


def test_yaml_syntax_error(tmp_path):
    msg = error(tmp_path, VALID.replace("[sinusoidal, alibi]", "[sinusoidal, alibi"))
    assert msg.startswith(f"{tmp_path}/t.yaml:") and "<yaml>: invalid YAML:" in msg and "allowed:" in msg


def test_unknown_task(tmp_path):
    assert ":4: task: unknown task 'speed'; allowed: decode, efficiency" in error(tmp_path, VALID.replace("_testing", "speed"))


def test_set_overrides_are_validated(tmp_path):
    loaded = suitemod.load(write(tmp_path, VALID))
    suite = suitemod.resolve(loaded, "cpu", suitemod.parse_set(["timeout_s=5", "grid.n=[7, 8]"]))
    assert suite.settings.timeout_s == 5.0 and suite.grid == {"n": [7, 8]}
    with pytest.raises(SuiteError, match=r"^--set timeout_s: timeout_s: must be a valid number \(got 'abc'\)"):
        suitemod.resolve(loaded, "cpu", suitemod.parse_set(["timeout_s=abc"]))
    with pytest.raises(SuiteError, match=r"^--set colour: colour: unknown key; allowed: timeout_s"):
        suitemod.resolve(loaded, "cpu", {"colour": 1})


def test_unknown_profile(tmp_path):
    loaded = suitemod.load(write(tmp_path, VALID))
    with pytest.raises(SuiteError, match="no profile 'gpu'; allowed: cpu"):
        suitemod.resolve(loaded, "gpu")


def test_suite_by_name_and_shipped_efficiency_profiles():
    assert suitemod.find("efficiency").name == "efficiency.yaml"
    with pytest.raises(SuiteError, match="^no such suite 'nope_not_here'; allowed: a suite name"):
        suitemod.find("nope_not_here")
    with pytest.raises(SuiteError, match=r"^no such suite 'efficency' \(did you mean 'efficiency'\?\); allowed"):
        suitemod.find("efficency")


def test_run_id_ignores_methods_but_follows_settings(tmp_path):
    loaded = suitemod.load(write(tmp_path, VALID))
    a = suitemod.resolve(loaded, "cpu")
    b = suitemod.resolve(loaded, "cpu", {"timeout_s": 7})
    assert a.fingerprint() == suitemod.resolve(loaded, "cpu").fingerprint() != b.fingerprint()


def test_schema_lists_suite_keys_and_task_settings():
    schema = suitemod.schema()
    assert schema["additionalProperties"] is False
    assert {"name", "task", "methods", "grid", "settings", "profiles"} <= set(schema["properties"])
    assert "tokens_per_step" in schema["$defs"]["efficiency.Settings"]["properties"]


def test_unprintable_character_is_a_yaml_error_not_a_traceback(tmp_path):
    msg = error(tmp_path, "name: x\x07\n")
    assert msg.startswith(f"{tmp_path}/t.yaml:1: <yaml>: invalid YAML: unacceptable character")


# -- the exported JSON Schema says what validation says --------------------------------------------


@pytest.fixture(scope="module")
def suite_schema():
    schema = suitemod.schema()
    jsonschema.Draft202012Validator.check_schema(schema)  # itself a valid schema
    return jsonschema.Draft202012Validator(schema)


def _yaml(path):
    import yaml

    return yaml.safe_load(path.read_text())


def _schema_errors(validator, data) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(data)]


def test_every_shipped_suite_follows_the_schema(suite_schema):
    names = suitemod.names()
    assert {"efficiency", "extrapolation", "precision", "kernels", "decode", "retrieval"} <= set(names)
    for name in names:
        path = suitemod.find(name)
        assert _schema_errors(suite_schema, _yaml(path)) == [], path


@pytest.mark.parametrize(
    "where, key",
    [
        ("settings", "tokens_per_stp"),  # misspelt suite setting
        ("profile settings", "tokens_per_stp"),  # misspelt in a profile's overrides
        ("grid", "seq_lne"),  # misspelt grid axis
        ("profile grid", "seq_lne"),
    ],
)
@pytest.mark.subprocess
def test_schema_and_validate_both_reject_a_misspelt_key(suite_schema, tmp_path, capsys, where, key):
    from posbench.cli import app as cli

    data = _yaml(suitemod.find("efficiency"))
    if where == "settings":
        data["settings"][key] = 1024
    elif where == "profile settings":
        data["profiles"]["cpu"]["settings"][key] = 1024
    elif where == "grid":
        data["grid"][key] = [64]
    else:
        data["profiles"]["cpu"]["grid"][key] = [64]
    import yaml

    path = tmp_path / "misspelt.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    errors = _schema_errors(suite_schema, data)
    assert len(errors) == 1 and key in errors[0] and "Additional properties are not allowed" in errors[0]
    assert cli.main(["validate", str(path)]) != 0
    assert key in capsys.readouterr().err


def test_schema_checks_setting_and_grid_values_per_task(suite_schema):
    data = _yaml(suitemod.find("efficiency"))
    data["settings"]["rounds"] = "five"
    data["grid"]["seq_len"] = [64, "long"]
    assert len(_schema_errors(suite_schema, data)) == 2
    # the same key is fine for the task that has it: settings follow the suite's own task
    data = _yaml(suitemod.find("precision"))
    assert _schema_errors(suite_schema, data) == []
    data["settings"]["tokens_per_step"] = 1024  # an efficiency setting, not a precision one
    (error,) = _schema_errors(suite_schema, data)
    assert "tokens_per_step" in error
    schema = suitemod.schema()
    assert schema["$defs"]["precision.Grid"]["properties"]["study"]["items"]["enum"] == ["bias_counts", "bias_dtype_ppl"]
    # nested models of a task (its corpus settings) are hoisted and their references still resolve
    assert schema["$defs"]["precision.SuiteSettings"]["properties"]["corpus"]["$ref"] == "#/$defs/precision.CorpusSettings"


# The method group `all`: a suite's `methods: all`, a profile's own `methods`, the cpu-all profiles
# of the shipped suites and `--methods all` on the command line (registry.expand is tested in
# tests/core/test_registry.py).


SUITE = """\
name: t
description: a test suite
version: 1
task: _testing
methods: {methods}
baseline: sinusoidal
metrics: [value]
grid:
  n: [1]
settings:
  timeout_s: 30
profiles:
  every:
    methods: {profile}
"""


def load_suite(tmp_path, methods="[sinusoidal, alibi]", profile="all"):
    from posbench.run import suite as suitemod

    path = tmp_path / "t.yaml"
    path.write_text(SUITE.format(methods=methods, profile=profile))
    return suitemod.load(path)


@pytest.mark.parametrize("methods", ["all", "[all]"])
def test_suite_methods_all_and_profile_methods(tmp_path, methods):
    from posbench.run import suite as suitemod

    loaded = load_suite(tmp_path, methods=methods, profile="[sinusoidal, learned]")
    assert suitemod.resolve(loaded, "default").methods == registry.names()
    assert suitemod.resolve(loaded, "every").methods == ["sinusoidal", "learned"]
    loaded = load_suite(tmp_path)
    assert suitemod.resolve(loaded, "default").methods == ["sinusoidal", "alibi"]
    assert suitemod.resolve(loaded, "every").methods == registry.names()


def test_suite_profile_methods_errors_name_the_line(tmp_path):
    from posbench.run.suite import SuiteError

    with pytest.raises(SuiteError, match=r"t.yaml:14: profiles.every.methods\[1\]: unknown method 'lerned'"):
        load_suite(tmp_path, profile="[sinusoidal, lerned]")
    with pytest.raises(SuiteError, match=r"t.yaml:14: profiles.every.methods\[1\]: 'xpos' is listed twice"):
        load_suite(tmp_path, profile="[xpos, xpos]")


@pytest.mark.parametrize("name", ["extrapolation", "efficiency"])
def test_cpu_all_profiles_run_every_method_and_defaults_stay_small(name):
    from posbench.run import suite as suitemod

    loaded = suitemod.load(name)
    assert suitemod.resolve(loaded, "cpu-all").methods == registry.names()
    cpu, cpu_all = suitemod.resolve(loaded, "cpu"), suitemod.resolve(loaded, "cpu-all")
    assert cpu_all.settings == cpu.settings and cpu_all.grid == cpu.grid  # the cpu profile, all methods
    for profile in ("default", "cpu", "gpu"):
        assert not set(suitemod.resolve(loaded, profile).methods) & set(NEW)


@pytest.mark.subprocess
def test_cli_methods_all_runs_every_method(tmp_path, capsys):
    from posbench.cli import app as cli

    code = cli.main(
        ["run", "--suite", "efficiency", "--profile", "cpu", "--methods", "all", "--dry-run", "--results", str(tmp_path / "r")]
    )
    assert code == 0
    out = capsys.readouterr().out
    for name in registry.names():
        assert f"run   {name}/seq_len=64" in out


# Suite input that must be refused with one line before anything runs (issue 13's hardening): YAML
# resource exhaustion (alias bombs, huge files), YAML that used to escape as a traceback, values no
# run can use (non-finite floats, seeds beyond 64 bits, duplicates, options the method's constructor
# does not take) and names that are not plain folder names.


REPO = Path(__file__).resolve().parents[2]


def load_error(tmp_path, text) -> str:
    with pytest.raises(SuiteError) as info:
        suitemod.load(write_suite(tmp_path, text))
    message = str(info.value)
    assert "\n" not in message and "allowed:" in message
    return message


# ---------------------------------------------------------------- resource exhaustion (YAML)


def test_alias_bomb_is_refused_quickly(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):  # 9**10 nodes once expanded
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    t0 = time.perf_counter()
    msg = load_error(tmp_path, VALID + "\n".join(lines) + "\n")
    assert time.perf_counter() - t0 < 5
    assert "aliases expand to more than 100000 nodes" in msg


def test_recursive_alias_is_one_line(tmp_path):
    assert "an alias refers to a node that contains it" in load_error(tmp_path, VALID + "x: &a [*a]\n")


def test_large_file_is_refused_before_reading(tmp_path):
    big = VALID + "junk:\n" + "  - 0123456789\n" * 100_000  # ~1.4 MB under an unknown key
    t0 = time.perf_counter()
    msg = load_error(tmp_path, big)
    assert time.perf_counter() - t0 < 2
    assert "<file>: the file is" in msg and "allowed: at most 1048576 bytes" in msg


def test_line_lookup_is_linear(tmp_path):
    # 90k items under an unknown key (under the size cap): the error needs one line number, and
    # finding it must not build a table of every key path first.
    text = VALID + "junk: [" + ",".join(["1"] * 90_000) + "]\n"
    t0 = time.perf_counter()
    msg = load_error(tmp_path, text)
    assert time.perf_counter() - t0 < 10
    assert ":18: junk: unknown key" in msg


def test_line_lookup_walks_the_tree():
    data, lines = suitemod._parse("a:\n  b:\n    - 1\n    - c: 2\nd: 3\n", "x")
    assert lines.line(("a", "b", 1, "c")) == 4
    assert lines.line(("a", "b", 0)) == 3
    assert lines.line(("a", "missing")) == 1 and lines.line(("d",)) == 5 and lines.line(()) == 1


@pytest.mark.parametrize(
    "text, expect",
    [
        ("x: {? [1, 2] : 3}\n", "<yaml>: a list used as a mapping key; allowed: plain keys"),
        ("x: {? {a: 1} : 3}\n", "<yaml>: a mapping used as a mapping key"),
        ("x: 1" + "0" * 5000 + "\n", "<yaml>: an integer of 5001 digits; allowed: integers of at most 30 digits"),
        ("x: " + "[" * 2000 + "]" * 2000 + "\n", "<yaml>: nesting too deep"),
    ],
)
def test_yaml_that_used_to_escape_as_a_traceback(tmp_path, text, expect):
    msg = load_error(tmp_path, VALID + text)
    assert f"t.yaml:{VALID.count(chr(10)) + 1}: " in msg or "nesting" in expect
    assert expect in msg


def test_merge_keys_are_supported(tmp_path):
    text = (
        VALID.replace("profiles:\n  cpu:\n", "profiles:\n  cpu: &base\n") + "  other:\n    <<: *base\n    description: merged\n"
    )
    loaded = suitemod.load(write_suite(tmp_path, text))
    other = suitemod.resolve(loaded, "other")
    assert other.settings.behaviour == "sleep" and other.grid == {"n": [3]}
    assert loaded.file.profiles["other"].description == "merged"  # its own key wins over the merge


def test_merged_key_error_points_at_the_anchor(tmp_path):
    text = (
        VALID.replace("      behaviour: sleep", "      behaviour: dance").replace(
            "profiles:\n  cpu:\n", "profiles:\n  cpu: &base\n"
        )
        + "  other:\n    <<: *base\n"
    )
    msg = load_error(tmp_path, text)
    assert ":15: profiles.cpu.settings.behaviour:" in msg


# ---------------------------------------------------------------- validation before anything runs


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", ".NaN"])
def test_non_finite_floats_are_refused(tmp_path, value):
    msg = load_error(tmp_path, VALID.replace("  timeout_s: 30", f"  timeout_s: 30\n  sleep_s: {value}"))
    assert ":12: settings.sleep_s: non-finite number" in msg and "allowed: finite numbers" in msg


def test_non_finite_in_set_and_grid(tmp_path):
    with pytest.raises(SuiteError, match=r"^--set sleep_s: sleep_s: non-finite number inf; allowed: finite"):
        suitemod.parse_set(["sleep_s=.inf"])
    with pytest.raises(SuiteError, match=r"^--set grid.n: grid.n\[1\]: non-finite number nan"):
        suitemod.parse_set(["grid.n=[1, .nan]"])


def test_seeds_beyond_64_bits(tmp_path):
    msg = load_error(tmp_path, VALID.replace("  timeout_s: 30", "  timeout_s: 30\n  seed: 18446744073709551616"))
    assert ":12: settings.seed: integer 18446744073709551616 does not fit in 64 bits" in msg
    with pytest.raises(SuiteError, match="does not fit in 64 bits"):
        suitemod.parse_set(["seed=-9223372036854775809"])
    assert suitemod.parse_set(["seed=9223372036854775807"]) == {"seed": 2**63 - 1}


def test_duplicate_grid_values(tmp_path):
    msg = load_error(tmp_path, VALID.replace("n: [1, 2]", "n: [1, 2, 1]"))
    assert ":9: grid.n[2]: 1 is listed twice; allowed: each value once per axis" in msg
    loaded = suitemod.load(write_suite(tmp_path, VALID))
    with pytest.raises(SuiteError, match=r"^--set grid.n: grid.n\[1\]: 7 is listed twice"):
        suitemod.resolve(loaded, "cpu", suitemod.parse_set(["grid.n=[7, 7]"]))


def test_duplicate_kernel_variants(tmp_path):
    text = (
        (REPO / "suites" / "kernels.yaml")
        .read_text()
        .replace("methods: [alibi_triton, t5_triton,", "methods: [alibi_triton, t5_triton, alibi_triton,")
    )
    msg = load_error(tmp_path, text)
    assert "methods[2]: 'alibi_triton' is listed twice; allowed: each method once" in msg


def test_tokens_per_step_shorter_than_seq_len(tmp_path):
    msg = load_error(tmp_path, efficiency_suite(grid="[64, 256]"))
    assert ":7: grid.seq_len[1]: seq_len 256 is longer than tokens_per_step 128" in msg
    loaded = suitemod.load(write_suite(tmp_path, efficiency_suite()))
    with pytest.raises(SuiteError, match=r"t.yaml:7: grid.seq_len\[0\]: seq_len 64 is longer than tokens_per_step 32"):
        suitemod.resolve(loaded, "default", {"tokens_per_step": 32})


def test_method_options_for_a_method_not_in_the_suite(tmp_path):
    msg = load_error(tmp_path, efficiency_suite("  method_options:\n    rotary: {base: 100}\n"))
    assert ":12: settings.method_options.rotary: options for 'rotary', which is not in methods; allowed: sinusoidal, alibi" in msg


def test_method_options_not_in_the_constructor_signature(tmp_path):
    import inspect

    from posbench.core import registry

    taken = [p for p in inspect.signature(registry.get("alibi").__init__).parameters if p not in ("self", "cfg")]
    msg = load_error(tmp_path, efficiency_suite("  method_options:\n    alibi: {slopes_base: 3}\n"))
    assert (
        f":12: settings.method_options.alibi.slopes_base: alibi takes no option 'slopes_base'; allowed: {', '.join(taken)}" in msg
    )
    ok = efficiency_suite("  method_options:\n    alibi: {" + taken[0] + ": compute}\n")
    suitemod.load(write_suite(tmp_path, ok))  # an option the constructor takes passes


@pytest.mark.parametrize(
    "override, problem",
    [
        ("{n_heads: 0}", "n_heads must be a positive integer"),
        ("{n_heads: 5}", "must be divisible by n_heads (5)"),
        ("{dropout: 1}", "dropout must be in [0, 1)"),
    ],
)
def test_model_overrides_out_of_range(tmp_path, override, problem):
    msg = load_error(tmp_path, efficiency_suite(f"  model_overrides: {override}\n"))
    assert ":11: settings.model_overrides: " in msg and problem in msg


def test_duplicate_keys_in_a_set_mapping():
    with pytest.raises(SuiteError, match=r"^--set by_method: by_method.alibi: duplicate key"):
        suitemod.parse_set(["by_method={alibi: ok, alibi: raise}"])
    with pytest.raises(SuiteError, match=r"^--set seed: seed: set twice"):
        suitemod.parse_set(["seed=1", "seed=2"])
    with pytest.raises(SuiteError, match="aliases expand to more than"):
        bomb = (
            "["
            + ", ".join(["&a0 [1,1,1,1,1,1,1,1,1,1]"] + [f"&a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 7)])
            + "]"
        )
        suitemod.parse_set([f"x={bomb}"])


@pytest.mark.parametrize("name", ["..", ".", ".hidden", "-x", "a/b", "/abs", "x" * 101])
def test_suite_name_must_be_a_plain_folder_name(tmp_path, name):
    msg = load_error(tmp_path, VALID.replace("name: t", f"name: {json.dumps(name)}"))
    assert ":1: name: not a plain folder name" in msg or ":1: name: " in msg


@pytest.mark.parametrize("run_id", ["../x", "/tmp/x", "..", "a/b", ""])
@pytest.mark.subprocess
def test_run_id_must_be_a_plain_folder_name(tmp_path, run_id, capsys):
    path = write_suite(tmp_path, VALID)
    results = tmp_path / "results"
    code = cli.main(["--suite", str(path), "--device", "cpu", "--results", str(results), "--run-id", run_id])
    assert code == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--run-id" in err and "not a plain folder name" in err
    assert not results.exists() and not (tmp_path / "x").exists()


@pytest.mark.subprocess
def test_bench_py_process_exit_code_and_one_line(tmp_path):
    bad = write_suite(tmp_path, VALID + "x: &a [*a]\n")
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench.py"), "validate", str(bad)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "an alias refers to a node that contains it" in proc.stderr


def test_constructor_options_read_from_source_match_the_signature():
    import inspect

    from posbench.core import registry

    for name in registry.names():
        params = inspect.signature(registry.get(name).__init__).parameters
        expected = (
            None if any(p.kind is p.VAR_KEYWORD for p in params.values()) else [p for p in params if p not in ("self", "cfg")]
        )
        assert suitemod.constructor_options(name) == expected, name


def test_a_variants_options_are_read_from_its_makers_class_without_importing():
    # methods/recipes.py builds its methods in a function (register_variants): validating a suite
    # that sets a recipe's options must still import no torch (bench.py validate, list)
    from posbench.core import registry
    from posbench.run.suite.method_options import _options_from_source

    for name in ("rnope_swa", "swan", "irope", "rotary_pi"):
        assert _options_from_source(Path(registry.require(name)), name) not in (False, None), name
    assert "window" in _options_from_source(Path(registry.require("swan")), "swan")


def test_pages_waiting_says_why_a_suite_has_no_cpu_page_and_stays_out_of_the_run_id(tmp_path):
    """Issue 69: the results index should say that kernels' page waits for a GPU run (its cpu
    profile runs Triton under the interpreter: no speed). The suite file says so (``page_waits``);
    the other shipped suites say nothing; the note is not part of the run id."""
    waiting = loading.pages_waiting()
    assert set(waiting) == set(loading.names())
    assert waiting["kernels"].startswith("a GPU run;") and "interpreter" in waiting["kernels"]
    assert all(note == "" for name, note in waiting.items() if name != "kernels")
    text = (loading.SUITES_DIR / "kernels.yaml").read_text()
    without = tmp_path / "kernels.yaml"
    without.write_text("\n".join(line for line in text.splitlines() if not line.startswith("page_waits:")) + "\n")
    assert (
        suitemod.resolve(suitemod.load(without), "cpu").fingerprint()
        == suitemod.resolve(suitemod.load("kernels"), "cpu").fingerprint()
    )
