"""The registry of position methods, modifiers and tasks: registering them, finding them, and
looking them up by name. This package is the interface; its private modules hold the tables
(``_tables``), the places looked in (``_places``), time-limited imports of method files and the
timer task packages are imported under (``_imports``), method files and folders with the entry
points (``_files``), METHOD+MODIFIER names (``_compose``), method lookups (``_lookup``), task
packages (``_tasks``) and putting the state back for tests (``_snapshot``). No module outside the
package reads their state.

Methods: the built-in ``methods/*.py``, the folders of ``POSBENCH_METHODS_PATH`` and
``--methods-dir``, and the ``posbench.methods`` entry points. Tasks: the packages of
``posbench/tasks/``, of the folders of ``POSBENCH_TASKS_PATH``, and the ``posbench.tasks`` entry
points. Listing names reads files and folders (``list`` and ``validate`` need no torch); asking for
one name imports only what defines it, whose ``register``/``register_task`` calls fill the tables,
so a broken plugin fails only its own users; a task package, like a method file, is code that runs,
imported within ``import_limit_s``.
"""

from __future__ import annotations

from posbench.core.registry._compose import ACTS_ON, COMPOSE_SEP, PLUGIN_PLACE, modifier_acts_on, modifier_place, split_composed
from posbench.core.registry._files import add_methods_dir, discover, listing, modifiers, names, recipes, scan_dir
from posbench.core.registry._imports import IMPORT_LIMIT_ENV, IMPORT_LIMIT_S, import_limit_s, is_imported
from posbench.core.registry._imports import import_file as import_method_file
from posbench.core.registry._lookup import GROUPS, build, expand, get, load_limited, origin, require
from posbench.core.registry._places import (
    METHODS_DIR,
    METHODS_ENTRY_POINTS,
    METHODS_ENV_PATH,
    TASKS_DIR,
    TASKS_ENTRY_POINTS,
    TASKS_ENV_PATH,
)
from posbench.core.registry._snapshot import Snapshot, forget_since, reset_search, snapshot
from posbench.core.registry._tables import (
    RegistryError,
    register,
    register_modifier,
    register_task,
    register_variants,
    registered,
    unregister,
)
from posbench.core.registry._tasks import find_task, get_task, task_names, task_replaced

__all__ = [
    "ACTS_ON",
    "COMPOSE_SEP",
    "GROUPS",
    "IMPORT_LIMIT_ENV",
    "IMPORT_LIMIT_S",
    "METHODS_DIR",
    "METHODS_ENTRY_POINTS",
    "METHODS_ENV_PATH",
    "PLUGIN_PLACE",
    "TASKS_DIR",
    "TASKS_ENTRY_POINTS",
    "TASKS_ENV_PATH",
    "RegistryError",
    "Snapshot",
    "add_methods_dir",
    "build",
    "discover",
    "expand",
    "find_task",
    "forget_since",
    "get",
    "get_task",
    "import_limit_s",
    "import_method_file",
    "is_imported",
    "listing",
    "load_limited",
    "modifier_acts_on",
    "modifier_place",
    "modifiers",
    "names",
    "origin",
    "recipes",
    "register",
    "register_modifier",
    "register_task",
    "register_variants",
    "registered",
    "require",
    "reset_search",
    "scan_dir",
    "snapshot",
    "split_composed",
    "task_names",
    "task_replaced",
    "unregister",
]
