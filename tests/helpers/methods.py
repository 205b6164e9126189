"""What several method test files share: the names of methods checked as a group, and small
methods built on hand-sized model configurations."""

import sys

import torch

from posbench.core import registry
from posbench.core.method import ModelConfig

# The methods added by issue 16 (each with its own tests in tests/methods/test_<name>.py);
# the default, cpu and gpu profiles of the shipped suites leave them out.
NEW = ["learned", "kerple_log", "xpos", "p_rope", "rope_nope_hybrid", "fire", "randomized"]


def model_method(name, **cfg):
    """The method on ModelConfig(d_model=64, n_heads=4) with ``cfg``'s fields (method_options too)."""
    return registry.build(ModelConfig(method=name, **{"d_model": 64, "n_heads": 4, **cfg}))


def one_head(name, hd=2, **options):
    """One layer, one head of dimension ``hd``."""
    return registry.build(ModelConfig(d_model=hd, n_heads=1, n_layers=1, method=name, method_options=options))


def encode(m, x, pos):
    """q and k = ``x`` at positions ``pos``, through the method's prepare and encode_qk (layer 0)."""
    state = m.prepare(pos, pos, torch.float32)
    return m.encode_qk(x, x, 0, state)


def module_of(name):
    """The imported module of the method file that registers ``name``."""
    registry.get(name)  # imports the method file
    return next(m for n, m in sys.modules.items() if n.startswith(f"posbench_methods_{name}_"))
