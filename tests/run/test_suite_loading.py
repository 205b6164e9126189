"""Suite validation: every mistake is one line naming the file, the line, the key and what is allowed."""

import textwrap

import jsonschema  # a dev dependency (pyproject.toml)
import pytest

from posbench.run import suite as suitemod
from posbench.run.suite import SuiteError
from tests.helpers.suites import VALID


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
