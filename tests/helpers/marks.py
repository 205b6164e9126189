"""Marks that depend on the machine: a test that runs a Triton kernel through the interpreter is `slow`.

Where TRITON_INTERPRET=1 (tests/conftest.py sets it unless the environment says otherwise, so on a
machine without a GPU) the fused kernels run at numpy speed on CPU tensors: right, but seconds per
call. On a GPU (TRITON_INTERPRET=0) the same tests are quick, and `make gpu-check` runs the kernel
tests with ``-m "not slow"``, so there they carry no mark.
"""

from __future__ import annotations

import shutil

import pytest

from posbench.core import registry
from posbench.triton_kernels import interpreter_on

# pytest.param(..., marks=SLOW_WHEN_INTERPRETED) or pytestmark = SLOW_WHEN_INTERPRETED
SLOW_WHEN_INTERPRETED = [pytest.mark.slow] if interpreter_on() else []


def slow_when_interpreted(test):
    """Decorator: ``test`` is marked slow where Triton kernels are interpreted."""
    return pytest.mark.slow(test) if interpreter_on() else test


def interpreted(method: str) -> bool:
    """Whether ``method`` runs a fused Triton kernel (methods/*_triton.py) that this process interprets."""
    return interpreter_on() and registry.origin(method).endswith("_triton.py")


def needs_binaries(*names: str):
    """Skip mark: the test needs these programs on PATH (a Slurm client: srun, sbatch); the reason names the absent ones."""
    absent = [n for n in names if shutil.which(n) is None]
    return pytest.mark.skipif(bool(absent), reason=f"not on PATH: {', '.join(absent)} (Debian's slurm-client installs them)")


# Where a library starts a process on its own account: Triton finding libcuda (ldconfig), the
# platform's word size (file) and compiling a kernel (ptxas) on a GPU machine; Inductor's C++
# compiler under torch.compile. Such a process is the compiler's doing, not the test's, and
# needs no `subprocess` mark (the first H100 run of `make gpu-check` failed every kernel test so).
COMPILER_PACKAGES = ("triton", "torch/_inductor")


def started_by_a_compiler(filenames: list[str]) -> bool:
    """Whether a process whose launching stack runs through ``filenames`` was started by a compiler package."""
    return any(f"/{package}/" in name.replace("\\", "/") for name in filenames for package in COMPILER_PACKAGES)
