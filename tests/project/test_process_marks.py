"""The conftest guard that fails an unmarked test starting a process (tests/conftest.py) counts the
test's own processes, not the ones a compiler starts on its own account (Triton's ldconfig, file
and ptxas on a GPU machine: the first H100 run of `make gpu-check` failed every kernel test so)."""

from __future__ import annotations

from tests.helpers.marks import started_by_a_compiler


def test_a_stack_through_triton_or_inductor_is_the_compilers_doing():
    site = "/usr/lib/python3/dist-packages"
    assert started_by_a_compiler(
        [f"{site}/pytest/main.py", f"{site}/triton/backends/nvidia/driver.py", "/usr/lib/python3.12/subprocess.py"]
    )
    assert started_by_a_compiler([f"{site}\\torch\\_inductor\\cpp_builder.py"])  # Windows separators
    assert not started_by_a_compiler(
        [f"{site}/pytest/main.py", "/work/posbench/engine/train.py", "/usr/lib/python3.12/subprocess.py"]
    )
    assert not started_by_a_compiler([f"{site}/torch/_dynamo/eval_frame.py", "/work/tritonish/run.py"])
