"""The method group `all`: a suite's `methods: all`, a profile's own `methods`, the cpu-all
profiles of the shipped suites and `--methods all` on the command line (registry.expand is tested
in tests/core/test_registry.py)."""

import pytest

from posbench.core import registry
from tests.helpers.methods import NEW

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
