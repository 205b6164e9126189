"""One case of a suite: a method at one grid point, with the settings it runs under.

A case exists in two forms, one per side of the process boundary:

- ``CaseSpec``: the case as JSON-ready data (``params`` and ``settings`` plain dicts). The suite
  expands a grid into specs, the runner schedules them, writes them to the worker's case file
  (``to_json``) and copies their fields into rows; a task's ``unavailable(case)`` is asked with a
  spec too, before any worker starts.
- ``Case[P, S]``: the same case with typed ``params`` and ``settings``, the task's pydantic
  ``Params`` and ``Settings`` models. The worker builds it from the spec's JSON
  (``posbench.run.worker.typed_case``) and hands it to ``task.run`` / ``task.run_group``, so a task
  reads ``case.settings.warmup_steps`` checked and typed, never a dict.

Both have the same ``id`` and the same ``to_json``; ``Case.spec()`` goes back to the JSON form
(a task that starts a worker of its own, such as the efficiency memory probe, does that).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Generic, TypeVar, Union

from pydantic import BaseModel

# A value a suite can hold: what YAML scalars, lists and mappings become.
JsonValue = Union[None, bool, int, float, str, list["JsonValue"], dict[str, "JsonValue"]]
JsonDict = dict[str, JsonValue]

P = TypeVar("P", bound=BaseModel)  # the task's Params
S = TypeVar("S", bound=BaseModel)  # the task's Settings


def case_id(method: str, params: JsonDict) -> str:
    """Stable, readable id: ``alibi/seq_len=512`` (axes in grid order)."""
    return "/".join([method] + [f"{k}={v}" for k, v in params.items()])


@dataclass(kw_only=True)
class _CaseFields:
    """What both forms share besides params and settings."""

    suite: str
    task: str
    method: str
    device: str  # "cpu" or "cuda"
    profile: str
    run_id: str
    methods_dirs: list[str] = field(default_factory=list)  # --methods-dir folders, for the registry
    out_dir: str = ""  # the run folder: tasks keep artefacts there (e.g. checkpoints/)


@dataclass(kw_only=True)
class CaseSpec(_CaseFields):
    """The case as data: what the runner schedules and the worker's case file holds."""

    params: JsonDict  # grid axis -> value, in grid order
    settings: JsonDict  # the task's Settings, dumped

    @property
    def id(self) -> str:
        return case_id(self.method, self.params)

    def to_json(self) -> JsonDict:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: JsonDict) -> CaseSpec:
        return cls(**raw)


@dataclass(kw_only=True)
class Case(_CaseFields, Generic[P, S]):
    """The case a task runs: ``params`` and ``settings`` are its own pydantic models."""

    params: P
    settings: S

    @property
    def id(self) -> str:
        return case_id(self.method, self.params.model_dump())

    def to_json(self) -> JsonDict:
        out: JsonDict = {f.name: getattr(self, f.name) for f in fields(_CaseFields)}
        out["methods_dirs"] = list(self.methods_dirs)
        out["params"] = self.params.model_dump()
        out["settings"] = self.settings.model_dump()
        return out

    def spec(self) -> CaseSpec:
        """The JSON form of this case (for a worker of its own)."""
        return CaseSpec.from_json(self.to_json())
