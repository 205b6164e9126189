"""One case of a task, built in-process as the worker would (settings and params validated)."""
from __future__ import annotations

from posbench.core import task as tasks
from posbench.core.case import Case


def make_case(task_name, method, params, settings, tmp_path):
    """(the loaded task, a cpu case of suite "t") with ``settings``/``params`` validated by the
    task's own models; the case writes under tmp_path."""
    task = tasks.get(task_name)
    case = Case(suite="t", task=task_name, method=method, params=params, settings=settings, device="cpu",
                profile="cpu", run_id="r", out_dir=str(tmp_path))
    case.settings = task.Settings.model_validate(settings)
    case.params = task.Params.model_validate(params)
    return task, case
