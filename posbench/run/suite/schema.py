"""The JSON Schema of suite files (``bench.py schema``), so an editor flags a misspelt key.

Built from the pydantic models: ``SuiteFile`` for the file, and each public task's ``Settings``
and ``Params`` for its ``settings`` and ``grid`` (see ``schema``).
"""

from __future__ import annotations

from posbench import tasks
from posbench.run.suite.launcher import Launcher
from posbench.run.suite.loading import SuiteFile


def schema() -> dict:
    """JSON Schema of suite files, saying what ``bench.py validate`` says about keys, so an editor
    flags a misspelt setting (``tokens_per_stp``) or grid axis as it is typed.

    For each public task: ``$defs`` holds ``<task>.Settings`` and ``<task>.Params`` (the pydantic
    models), ``<task>.SuiteSettings`` (the same keys, none required: a profile may supply what the
    suite leaves out) and ``<task>.Grid`` (its axes, each a non-empty list of the axis's values);
    and ``allOf`` holds, per task, ``if task is <task> then`` the suite's and every profile's
    ``settings`` and ``grid`` follow those, rejecting any other key. What needs several keys at
    once (a required setting, seq_len <= tokens_per_step, method options) stays with ``validate``.
    """
    out = SuiteFile.model_json_schema()
    defs = out.setdefault("$defs", {})
    # `methods: all` (the group, not a list) is read as [all] before validation (_method_group_as_list)
    group = {"const": "all", "description": "every registered method (or every variant of the task)"}
    out["properties"]["methods"] = {
        "anyOf": [out["properties"]["methods"], group],
        "description": out["properties"]["methods"].get("description", ""),
    }
    defs["Profile"]["properties"]["methods"]["anyOf"].append(group)
    # `launcher:` is read as a dict and validated by Launcher once a profile and --set are merged
    # in (loading.resolve); the schema names its keys, so a misspelt one is flagged as typed too.
    defs["Launcher"] = _hoisted(Launcher.model_json_schema(), "Launcher.", defs)
    ref = {"$ref": "#/$defs/Launcher"}
    out["properties"]["launcher"] = {**ref, "description": out["properties"]["launcher"].get("description", "")}
    profile_launcher = defs["Profile"]["properties"]["launcher"]
    defs["Profile"]["properties"]["launcher"] = {
        "anyOf": [ref, {"type": "null"}],
        "description": profile_launcher.get("description", ""),
    }
    branches = []
    for name in tasks.names():
        task = tasks.get(name)
        settings = _hoisted(task.Settings.model_json_schema(), f"{name}.", defs)
        params = _hoisted(task.Params.model_json_schema(), f"{name}.", defs)
        defs[f"{name}.Settings"] = settings
        defs[f"{name}.Params"] = params
        defs[f"{name}.SuiteSettings"] = {
            "title": f"{name} settings",
            "type": "object",
            "properties": settings["properties"],
            "additionalProperties": False,
            "description": f"settings of the {name} task (a suite's, or a profile's overrides)",
        }
        defs[f"{name}.Grid"] = {
            "title": f"{name} grid",
            "type": "object",
            "additionalProperties": False,
            "properties": {axis: {"type": "array", "minItems": 1, "items": spec} for axis, spec in params["properties"].items()},
            "description": f"grid axes of the {name} task: {', '.join(params['properties'])}",
        }
        own = {"settings": {"$ref": f"#/$defs/{name}.SuiteSettings"}, "grid": {"$ref": f"#/$defs/{name}.Grid"}}
        branches.append(
            {
                "if": {"properties": {"task": {"const": name}}, "required": ["task"]},
                "then": {"properties": {**own, "profiles": {"additionalProperties": {"properties": own}}}},
            }
        )
    out["allOf"] = branches
    return out


def _hoisted(model_schema: dict, prefix: str, defs: dict) -> dict:
    """``model_schema`` with its own ``$defs`` moved into ``defs`` under ``prefix`` and every
    ``$ref`` to them rewritten, so it can live inside another document's ``$defs``."""
    own = model_schema.pop("$defs", {})
    renamed = {f"#/$defs/{key}": f"#/$defs/{prefix}{key}" for key in own}

    def rewrite(node):
        if isinstance(node, dict):
            return {k: renamed.get(v, v) if k == "$ref" else rewrite(v) for k, v in node.items()}
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    for key, value in own.items():
        defs[f"{prefix}{key}"] = rewrite(value)
    return rewrite(model_schema)
