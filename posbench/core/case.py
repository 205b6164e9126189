"""One case of a suite: a method at one grid point, with the settings it runs under.

The runner writes a case as JSON for the worker; the worker turns it back into a ``Case`` with
typed ``settings`` and ``params`` (the task's pydantic models) before calling ``task.run``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


def case_id(method: str, params: dict[str, Any]) -> str:
    """Stable, readable id: ``alibi/seq_len=512`` (axes in grid order)."""
    return "/".join([method] + [f"{k}={v}" for k, v in params.items()])


@dataclass
class Case:
    suite: str
    task: str
    method: str
    params: Any  # dict in JSON, the task's Params model inside the worker
    settings: Any  # dict in JSON, the task's Settings model inside the worker
    device: str  # "cpu" or "cuda"
    profile: str
    run_id: str
    methods_dirs: list[str] = field(default_factory=list)  # --methods-dir folders, for the registry
    out_dir: str = ""  # the run folder: tasks keep artefacts there (e.g. checkpoints/)

    @property
    def id(self) -> str:
        params = self.params if isinstance(self.params, dict) else self.params.model_dump()
        return case_id(self.method, params)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("params", "settings"):
            value = getattr(self, key)
            out[key] = value if isinstance(value, dict) else value.model_dump()
        return out
