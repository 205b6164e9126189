"""The report's part of the task contract: report/ names no task, and what a task declares
(TITLE, REPORT_ORDER, REPORT_COLUMN, report_sections, summary_tables, compare_values) is what the
report, the run summary and compare do; a task that declares nothing gets the defaults."""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

import posbench
from posbench import tasks as task_registry
from posbench.core.registry import TASKS_ENV_PATH
from posbench.report.compare_cases import case_metrics
from posbench.report.rows import load_runs
from posbench.report.sections import collect_sections
from posbench.report.tabulate import run_tables
from posbench.store.meta import RunMeta, write_run_meta
from posbench.tasks import find as find_task

REPORT_DIR = Path(posbench.__file__).parent / "report"
TASK_NAMES = ("efficiency", "extrapolation", "precision", "kernels", "decode", "retrieval", "lengthgen")

# A plugin task with a report of its own: a first section before every built-in one, one table per
# row (its "score" at each "width"), a run summary of one table, and a number compare reads from
# its rows' series.
PLUGIN = textwrap.dedent("""
    from pydantic import BaseModel

    from posbench.core.registry import register_task
    from posbench.core.task import Metric, Task, TaskSettings

    METRICS = {"score": Metric(title="Score", unit="", doc="a made-up score", higher_is_better=True),
               "series_score": Metric(title="Series score", unit="", doc="read from the series", higher_is_better=True)}

    class Settings(TaskSettings):
        pass

    class Params(BaseModel):
        width: int

    def run(case):
        return {"metrics": {}, "series": {}}

    def report_sections(runs, baseline=None):
        from posbench.report.sections import Section, metric_section

        section = metric_section(runs, "_reported", baseline)
        return [Section("Own report, first part", "_reported", section.blocks), Section("Own report, empty", "_reported")]

    def summary_tables(runs):
        from posbench.report.tabulate import metric_tables

        return metric_tables(runs, "_reported", metrics=["score"])[:1]

    def compare_values(row):
        return {"series_score": row.series.get("score"), "score": -1.0}

    TASK = register_task(Task(Settings, Params, METRICS, run, TITLE="Own report", REPORT_ORDER=5,
                              report_sections=report_sections, summary_tables=summary_tables,
                              compare_values=compare_values, name="_reported"))
""")


def _row(task, method, params, metrics, series=None):
    case_id = f"{task}/{method}/" + ",".join(f"{k}={v}" for k, v in params.items())
    return {
        "case_id": case_id,
        "suite": task.strip("_"),
        "task": task,
        "method": method,
        "params": params,
        "status": "ok",
        "message": "",
        "metrics": metrics,
        "series": series or {},
        "settings": {},
        "device": "cpu",
        "profile": "cpu",
        "run_id": f"run-{task}",
        "started_at": "2024-06-01T12:00:00+00:00",
        "duration_s": 1.0,
        "posbench_version": "0.1.0",
        "git_commit": "abc1234def5678",
    }


def _write(root: Path, rows: list[dict], metrics: list[str]) -> Path:
    run_dir = root / rows[0]["suite"] / rows[0]["run_id"]
    run_dir.mkdir(parents=True)
    (run_dir / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "env.json").write_text(json.dumps({"git_commit": "abc1234def5678", "device": "cpu"}))
    write_run_meta(
        run_dir,
        RunMeta(
            suite=rows[0]["suite"],
            version=1,
            task=rows[0]["task"],
            baseline="a",
            methods=["a", "b"],
            metrics=metrics,
            run_id=rows[0]["run_id"],
            grid={k: sorted({r["params"][k] for r in rows}) for k in rows[0]["params"]},
        ),
    )
    return run_dir


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """The task package ``_reported`` in a folder of ``POSBENCH_TASKS_PATH`` (it leaves with the
    test: tests/conftest.py)."""
    package = tmp_path / "tasks" / "_reported"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text(PLUGIN)
    monkeypatch.setenv(TASKS_ENV_PATH, os.pathsep.join([str(tmp_path / "tasks"), os.environ[TASKS_ENV_PATH]]))
    return "_reported"


def test_the_report_names_no_task_and_imports_none():
    for path in sorted(REPORT_DIR.glob("*.py")):
        text = path.read_text()
        named = [w for w in TASK_NAMES if re.search(rf"\b{w}\b", text, re.IGNORECASE)]
        assert not named, f"{path.name} names {named}"
        assert "posbench.tasks" not in text, f"{path.name} imports a task"


def test_a_task_declares_its_title_place_sections_summary_and_compare_values(tmp_path, plugin):
    rows = [_row(plugin, m, {"width": w}, {"score": s * w}) for m, s in (("a", 1.0), ("b", 2.0)) for w in (2, 4)]
    _write(tmp_path / "runs", rows, ["score"])
    _write(tmp_path / "runs", [_row("_testing", "a", {"n": 1}, {"value": 1000.0})], ["value"])
    runs = load_runs([tmp_path / "runs"], find_task=find_task)

    sections = collect_sections(runs)
    # the plugin's place (5) is before every built-in task; the empty section is left out; an
    # undeclared task follows under its name, and the first section of each holds its appendix
    assert [s.heading for s in sections] == ["Own report, first part", "_testing"]
    (block,) = sections[0].blocks
    assert block.table.cell("b", 4).text == "8 (2.00x)" and block.table.columns == [2, 4]
    assert sections[1].blocks[0].table.metric == "value"

    (summary,) = run_tables(runs, {r["case_id"] for r in rows})
    assert summary.metric == "score"

    row = SimpleNamespace(**_row(plugin, "a", {"width": 2}, {"score": 3.0}, {"score": 7.0}))
    assert case_metrics(row, {plugin: find_task(plugin)}) == {"score": 3.0, "series_score": 7.0}  # a stored metric wins


def test_defaults_of_a_task_that_declares_nothing(plugin):
    loaded = task_registry.get("_testing")
    assert loaded.title == "_testing" and loaded.REPORT_ORDER == task_registry.Task.LAST
    assert loaded.REPORT_COLUMN == "" and loaded.report_sections is None
    assert loaded.summary_tables is None and loaded.compare_values is None
    assert task_registry.get(plugin).title == "Own report"
    assert task_registry.find("not-a-task") is None


def test_built_in_sections_keep_their_order():
    places = {name: task_registry.get(name).REPORT_ORDER for name in TASK_NAMES}
    assert sorted(TASK_NAMES, key=lambda n: (places[n], n)) == [
        "efficiency",
        "extrapolation",
        "kernels",
        "decode",
        "lengthgen",
        "precision",
        "retrieval",
    ]
