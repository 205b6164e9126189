"""posbench: measure what a positional-encoding method costs and how well it extrapolates.

Its packages (core, data, kernels, engine, report, tasks, run, cli), what each holds and what it
may import: docs/architecture.md.
"""
import importlib
import importlib.abc
import importlib.util
import sys

__version__ = "0.1.0"


# The plugin API's old module paths, kept working after the modules moved into packages: a plugin
# written as ``from posbench.method import PositionMethod`` gets the very module
# ``posbench.core.method`` (same classes, so isinstance and the registry see one thing). Aliased
# lazily, so ``import posbench`` stays free of torch.
LEGACY_MODULES = {
    "posbench.method": "posbench.core.method",
    "posbench.registry": "posbench.core.registry",
    "posbench.config": "posbench.core.config",
    "posbench.model": "posbench.core.model",
    "posbench.alibi": "posbench.core.alibi_math",
    "posbench.testing": "posbench.core.conformance",
    "posbench.core.bias": "posbench.attention.bias",  # BiasMethod moved beside the plans it chooses
}


class _LegacyAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname in LEGACY_MODULES:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return importlib.import_module(LEGACY_MODULES[spec.name])

    def exec_module(self, module):
        pass  # the real module is already executed; the import system binds it under the old name


if not any(isinstance(f, _LegacyAlias) for f in sys.meta_path):
    sys.meta_path.insert(0, _LegacyAlias())  # ahead of path finders: an old file of that name never wins
