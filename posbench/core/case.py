"""One case of a suite: a method at one grid point, with the settings it runs under, in its two
forms: ``CaseSpec`` (JSON-ready dicts: what the suite expands, the runner schedules and the worker's
case file holds) and ``Case`` (the task's typed ``Params`` and ``Settings``: what a task runs).
Both have the same ``id`` and ``to_json``; ``Case.spec()`` goes back to the JSON form.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Generic, TypeVar, Union

from pydantic import BaseModel

# A value a suite can hold: what YAML scalars, lists and mappings become.
JsonValue = Union[None, bool, int, float, str, list["JsonValue"], dict[str, "JsonValue"]]  # noqa: UP007  (a runtime alias, read by pydantic: Union keeps its forward references)
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
    # The runner's way to run a spec alone in a fresh worker process: (spec, timeout_s) -> its
    # result (a task that needs a process of its own, e.g. the efficiency memory probe). Not data.
    run_alone: Callable[[CaseSpec, float], dict] | None = field(default=None, repr=False, compare=False)

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
