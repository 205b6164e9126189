"""A case as data (``CaseSpec``, what the runner schedules and writes) and typed (``Case``, what a
task runs): the worker turns one into the other and nothing is lost either way."""

from datetime import datetime

import pytest
import torch

from posbench import tasks
from posbench.core.case import Case, CaseSpec
from posbench.engine.env import can_flush_subnormals, collect, subnormals_flushed
from posbench.run import suite as suitemod
from posbench.run.worker import prepare, run_case, run_group, typed_case
from posbench.store.row import make_row
from tests.helpers.suites import make_suite

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


# Subnormal floats are flushed in every worker unless a suite says ``flush_denormal: false`` (issue
# 59: on an Intel Xeon they cost ALiBi 2.6x its step, a cost of the CPU, not of the method), and
# env.json and every row say which was in force. tests/conftest.py puts this process's flush back
# after each test.


# The flush tests need a CPU that can flush: the mark sits on each of them, not on the module, so
# the case-form tests above still run everywhere.
needs_flush = pytest.mark.skipif(not can_flush_subnormals(), reason="this CPU cannot flush subnormals (not x86 with SSE3)")


def _case(method="sinusoidal", **settings) -> Case:
    testing = tasks.get("_testing")
    return Case(
        suite="s",
        task="_testing",
        method=method,
        params=testing.Params(n=1),
        settings=testing.Settings(**settings),
        device="cpu",
        profile="default",
        run_id="r",
    )


@needs_flush
def test_subnormals_flushed_reads_what_torch_does():
    tiny = torch.finfo(torch.float32).tiny  # the smallest normal float32
    torch.set_flush_denormal(False)
    assert not subnormals_flushed() and (torch.tensor([tiny]) / 4).item() == tiny / 4  # a subnormal
    torch.set_flush_denormal(True)
    assert subnormals_flushed() and (torch.tensor([tiny]) / 4).item() == 0.0
    assert can_flush_subnormals() and subnormals_flushed()  # asking leaves the flush as it was


@needs_flush
def test_every_task_flushes_by_default_and_the_worker_sets_it():
    assert tasks.get("efficiency").Settings.model_fields["flush_denormal"].default is True
    torch.set_flush_denormal(False)
    assert prepare(_case(flush_denormal=True)) is True and subnormals_flushed()


@needs_flush
def test_flush_denormal_false_leaves_subnormals_alone_also_in_a_process_that_flushed():
    torch.set_flush_denormal(True)  # an earlier case of this process (ranks in-process) flushed
    assert prepare(_case(flush_denormal=False)) is False and not subnormals_flushed()


@needs_flush
def test_every_result_and_row_says_whether_its_case_flushed():
    torch.set_flush_denormal(False)
    ok = run_case(_case(flush_denormal=True).to_json(), limit_memory=False)
    failed = run_case(_case(flush_denormal=True, behaviour="raise").to_json(), limit_memory=False)
    assert (ok["status"], failed["status"]) == ("ok", "error")
    assert ok["info"]["flush_denormal"] is True and failed["info"]["flush_denormal"] is True
    off = run_case(_case(flush_denormal=False).to_json(), limit_memory=False)
    assert off["info"]["flush_denormal"] is False
    group = run_group({"group": [_case(m, flush_denormal=True, pairing="windows").to_json() for m in ("alibi", "nope")]})
    assert [r["info"]["flush_denormal"] for r in group["group"]] == [True, True]
    row = make_row(_case().spec(), ok, datetime.now(), 0.1, "abc")
    assert row["info"]["flush_denormal"] is True


@needs_flush
def test_the_setting_at_its_default_leaves_run_ids_as_they_were(tmp_path):
    """Run ids of earlier runs stay (resume finds their folders): a task's default is not hashed,
    the other value is. The ids are those the suites had before the setting existed."""
    testing = suitemod.load(make_suite(tmp_path, ["sinusoidal"]))  # _testing: off by default
    efficiency = suitemod.load(suitemod.find("efficiency"))
    assert suitemod.resolve(efficiency, "cpu").settings.flush_denormal is True
    for loaded, profile, default, before in ((testing, "default", False, "c76032c0"), (efficiency, "cpu", True, "4cde8514")):
        assert suitemod.resolve(loaded, profile).fingerprint() == before
        assert suitemod.resolve(loaded, profile, {"flush_denormal": default}).fingerprint() == before
        assert suitemod.resolve(loaded, profile, {"flush_denormal": not default}).fingerprint() != before


@needs_flush
def test_env_json_says_whether_the_workers_flush():
    """The runner hands ``collect`` the suite's setting (tests/run/test_runner.py: a run's env.json
    with the setting off); this CPU can flush, so the record is the setting, the process left as it was."""
    torch.set_flush_denormal(False)
    assert collect("cpu", True)["flush_denormal"] is True and collect("cpu", False)["flush_denormal"] is False
    assert not subnormals_flushed()
