"""A case as data (``CaseSpec``, what the runner schedules and writes) and typed (``Case``, what a
task runs): the worker turns one into the other and nothing is lost either way."""

from posbench import tasks
from posbench.core.case import Case, CaseSpec
from posbench.run import suite as suitemod
from posbench.run.worker import typed_case

SUITE = """\
name: forms
description: case forms
version: 1
task: _testing
methods: [sinusoidal, rotary]
grid:
  n: [1, 2]
settings:
  threads: 1
"""


def _specs(tmp_path):
    path = tmp_path / "forms.yaml"
    path.write_text(SUITE)
    return suitemod.resolve(suitemod.load(path), "default").cases("cpu", "r", [str(tmp_path)])


def test_a_suite_expands_into_json_specs(tmp_path):
    specs = _specs(tmp_path)
    assert all(type(s) is CaseSpec for s in specs)
    assert [s.id for s in specs] == ["sinusoidal/n=1", "rotary/n=1", "sinusoidal/n=2", "rotary/n=2"]
    first = specs[0]
    assert first.params == {"n": 1} and first.settings["threads"] == 1 and first.settings["timeout_s"] == 600.0
    assert CaseSpec.from_json(first.to_json()) == first


def test_the_worker_types_a_spec_and_the_typed_case_goes_back_to_the_same_spec(tmp_path):
    spec = _specs(tmp_path)[3]
    spec.out_dir = str(tmp_path)
    task = tasks.get("_testing")
    case = typed_case(task, spec.to_json())
    assert type(case) is Case
    assert isinstance(case.params, task.Params) and isinstance(case.settings, task.Settings)
    assert case.params.n == 2 and case.settings.threads == 1
    assert case.id == spec.id == "rotary/n=2"
    assert case.methods_dirs == [str(tmp_path)] and case.out_dir == str(tmp_path)
    assert case.to_json() == spec.to_json()
    again = case.spec()
    assert again == spec and again is not spec
    again.settings["threads"] = 2  # a spec of its own: changing it leaves the typed case alone
    assert case.settings.threads == 1
