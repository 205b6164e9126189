"""posbench: measure what a positional-encoding method costs and how well it extrapolates."""
from pathlib import Path

__version__ = "0.1.0"


def builtin_dir(name: str) -> Path:
    """The folder of the built-in ``methods`` or ``suites``.

    A developer edits the checkout's top-level ``methods/`` and ``suites/``; the wheel ships those
    same folders as ``posbench/methods/`` and ``posbench/suites/`` (pyproject's package-dir), so an
    installed package looks inside itself and a checkout (or an editable install) one level up.
    """
    here = Path(__file__).resolve().parent
    inside = here / name
    return inside if inside.is_dir() else here.parent / name
