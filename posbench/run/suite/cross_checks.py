"""Checks of a resolved suite that need several keys at once (each field alone passed its own
bounds), so that no such mistake waits for a worker to find it: an error row per case (exit 3),
or an ``unavailable`` row for a conflict that holds on every machine.

``check_across`` runs them in turn: seq_len against tokens_per_step, the model's overrides, the
task's own ``check_grid`` (settings against the grid), a model window beside a method that sets
its own (a recipe), and ``method_options`` against each constructor. Each problem is one
``SuiteError`` built by the caller's ``fail(path, problem, allowed)``, ``path`` the key's source.
"""

from __future__ import annotations

from typing import NamedTuple

from pydantic import BaseModel

from posbench.core.task import ModelSettings
from posbench.run.suite.method_options import constructor_options


class Methods(NamedTuple):
    """The methods of a run: the suite's (its profile's) and those ``--methods`` names."""

    listed: list[str]
    joining: list[str]

    @property
    def all(self) -> list[str]:
        return self.listed + [m for m in self.joining if m not in self.listed]


def check_across(settings: BaseModel, source: dict, grid: dict, grid_source: dict, methods: Methods, task, fail) -> None:
    """Every check of the module; ``source``/``grid_source``: where each setting and axis came from."""
    _check_batch(settings, grid, grid_source, fail)
    if task.check_grid is not None:
        misfit = task.check_grid(settings, grid)
        if misfit is not None:
            key, problem, allowed = misfit
            raise fail(source.get(key, ("settings", key)), problem, allowed)
    if not isinstance(settings, ModelSettings):
        return
    window = _model_window(settings, source, fail)
    if window is not None and not task.own_methods:
        _check_window(methods, source, fail)
    if settings.method_options and not task.own_methods:
        _check_method_options(settings.method_options, source, methods.all, fail)


def _check_batch(settings: BaseModel, grid: dict, grid_source: dict, fail) -> None:
    if "tokens_per_step" not in type(settings).model_fields:
        return
    tokens = settings.tokens_per_step
    for i, seq_len in enumerate(grid.get("seq_len", [])):
        if seq_len > tokens:  # the batch (tokens_per_step // seq_len) would be empty
            raise fail(
                grid_source["seq_len"] + (i,),
                f"seq_len {seq_len} is longer than tokens_per_step {tokens}",
                f"seq_len <= tokens_per_step ({tokens}), or a larger tokens_per_step",
            )


def _model_window(settings: ModelSettings, source: dict, fail) -> int | None:
    """The model's sliding window (None: full attention); one line on overrides that give no model."""
    if not settings.model_overrides:
        return None
    from posbench.core.config import model_config

    try:
        return model_config(settings.model, **settings.model_overrides).window
    except (ValueError, TypeError) as exc:
        problem, _, allowed = str(exc).removeprefix("model config: ").partition("; allowed: ")
        raise fail(
            source.get("model_overrides", ("settings", "model_overrides")),
            problem,
            allowed or "overrides that give a valid model (positive sizes, d_model divisible by n_heads)",
        ) from None


def _check_window(methods: Methods, source: dict, fail) -> None:
    """A recipe (methods/recipes.py) sets its own sliding window: beside a model window it would be
    declined on every machine, so it is refused here (read from the method files: no import) where
    it was asked for: named by ``--methods``, or a suite whose every method is a recipe. A recipe a
    profile lists beside other methods is declined by its own cases (an ``unavailable`` row), so a
    model window can still be set for the others."""
    from posbench.core import registry

    recipes = registry.recipes()
    is_recipe = [m for m in methods.all if m.split(registry.COMPOSE_SEP)[0] in recipes]
    asked = is_recipe if len(is_recipe) == len(methods.all) else [m for m in is_recipe if m in methods.joining]
    for method in asked:
        if method.split(registry.COMPOSE_SEP)[0] in recipes:
            where = source.get("model_overrides", ("settings", "model_overrides"))
            path = where if where[0] == "--set" else where + ("window",)
            raise fail(
                path,
                f"{method} sets its own sliding window (a recipe: its option window)",
                f"no model window with {method}, or leave {method} out",
            )


def _check_method_options(options: dict, source: dict, methods: list[str], fail) -> None:
    base = source.get("method_options", ("settings", "method_options"))
    for method, opts in options.items():
        if method not in methods:
            raise fail(base + (method,), f"options for {method!r}, which is not in methods", ", ".join(methods))
        allowed = constructor_options(method)
        if allowed is None:
            continue  # the constructor takes any keyword
        for option in opts:
            if option not in allowed:
                raise fail(
                    base + (method, option),
                    f"{method} takes no option {option!r}",
                    ", ".join(allowed) or f"none ({method} takes no options)",
                )
