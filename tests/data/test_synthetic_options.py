"""The synthetic corpora's options checked without numpy (issue 67): one line naming the option
and its bounds, the same bounds the sources guard."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from posbench.data import synthetic_copy, synthetic_options

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "kind, options, message",
    [
        (
            "synthetic-copy",
            {"copy_prob": 1.5},
            "synthetic-copy: copy_prob 1.5 is out of bounds; allowed: copy_prob a number in [0, 1)",
        ),
        (
            "synthetic-copy",
            {"max_distance": 0},
            "synthetic-copy: max_distance 0 is out of bounds; allowed: max_distance an integer >= 1",
        ),
        (
            "synthetic-copy",
            {"distance": "gaussian"},
            "synthetic-copy: distance 'gaussian' is out of bounds; allowed: distance decay, log-uniform",
        ),
        ("synthetic-copy", {"decay": 0}, "synthetic-copy: decay 0 is out of bounds; allowed: decay a number in (0, 1]"),
        (
            "synthetic-copy",
            {"order": 2},
            "synthetic-copy: unknown option 'order'; allowed: vocab, branching, jump, copy_prob, max_distance, decay, distance",
        ),
        ("synthetic", {"jump": 0}, "synthetic: jump 0 is out of bounds; allowed: jump a number in (0, 1]"),
        (
            "synthetic",
            {"vocab": 4, "branching": 5},
            "synthetic: branching 5 is out of bounds; allowed: branching an integer in [1, vocab]",
        ),
        ("synthetic", {"vocab": "64"}, "synthetic: vocab '64' is out of bounds; allowed: vocab an integer >= 2"),
        (
            "synthetic",
            {"order": 10**9},
            "synthetic: vocab ** order (vocab 64, order 1000000000) is too many states; allowed: at most 4194304 (a smaller vocab or order)",
        ),
    ],
)
def test_options_out_of_bounds_are_one_line(kind, options, message):
    with pytest.raises(ValueError) as info:
        synthetic_options.check(kind, options)
    assert str(info.value) == message


def test_the_defaults_and_the_suites_options_pass():
    synthetic_options.check("synthetic", {})
    synthetic_options.check("synthetic-copy", {"vocab": 256, "max_distance": 8192, "distance": "log-uniform"})
    assert synthetic_copy.DEFAULTS is synthetic_options.COPY_DEFAULTS


def test_what_the_check_passes_the_source_accepts():
    # the source's own guard (direct callers) and this check agree at the bounds
    edge = {"copy_prob": 0.0, "max_distance": 1, "decay": 1.0, "jump": 1.0, "branching": 1}
    synthetic_options.check("synthetic-copy", edge)
    synthetic_copy.make_source(seed=0, **{**synthetic_copy.DEFAULTS, **edge})


@pytest.mark.subprocess
def test_checking_imports_no_numpy():
    code = "import sys\nfrom posbench.protocols import training\nprint('numpy' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    ran = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert ran.stdout.strip() == "False", ran.stderr
