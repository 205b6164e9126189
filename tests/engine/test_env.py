"""env.json: versions and machine, and NVML through a fake pynvml module."""

import json
import os
import shutil
import stat
import subprocess
import sys
import types
from pathlib import Path

import pytest

from posbench import __version__
from posbench.cli import app as cli
from posbench.core import files
from posbench.engine import env
from tests.helpers.suites import make_suite


def make_pynvml(fail_init=False, unsupported=()):
    calls = []

    def query(name, value):
        def fn(handle, *args):
            calls.append((name, handle, args))
            if name in unsupported:
                raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
            return value

        return fn

    def init():
        if fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    mod = types.SimpleNamespace(
        NVML_CLOCK_SM=1,
        NVML_CLOCK_MEM=2,
        NVML_TEMPERATURE_GPU=0,
        nvmlInit=init,
        nvmlDeviceGetHandleByIndex=lambda i: f"gpu{i}",
        nvmlSystemGetDriverVersion=lambda: b"550.54",
        nvmlDeviceGetName=query("name", b"NVIDIA H100 80GB HBM3"),
        nvmlDeviceGetMemoryInfo=query("mem", types.SimpleNamespace(total=85_000_000_000)),
        nvmlDeviceGetClockInfo=lambda h, kind: {1: 1980, 2: 2619}[kind],
        nvmlDeviceGetMaxClockInfo=lambda h, kind: {1: 1980, 2: 2619}[kind] + 10,
        nvmlDeviceGetPowerManagementLimit=query("power", 700_000),
        nvmlDeviceGetTemperature=query("temp", 41),
    )
    return mod, calls


def test_nvml_info_from_a_fake_gpu(monkeypatch):
    fake, calls = make_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    info = env.nvml_info()
    assert info == {
        "name": "NVIDIA H100 80GB HBM3",
        "driver": "550.54",
        "memory_total_bytes": 85_000_000_000,
        "sm_clock_mhz": 1980,
        "sm_clock_max_mhz": 1990,
        "mem_clock_mhz": 2619,
        "mem_clock_max_mhz": 2629,
        "power_limit_w": 700.0,
        "temperature_c": 41,
    }
    assert calls[0][1] == "gpu3"  # CUDA_VISIBLE_DEVICES=3 is NVML's device 3


def test_unsupported_query_is_recorded_not_dropped(monkeypatch):
    fake, _ = make_pynvml(unsupported=("power",))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    info = env.nvml_info(0)
    assert info["power_limit_w"] == "unsupported" and info["temperature_c"] == 41


def test_no_nvml_is_a_string_not_a_crash(monkeypatch):
    fake, _ = make_pynvml(fail_init=True)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert env.nvml_info(0) == env.NVML_UNAVAILABLE
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    assert env.open_nvml(0) == (None, env.NVML_UNAVAILABLE)
    assert "pip install nvidia-ml-py" in env.NVML_UNAVAILABLE


def test_collect_on_cpu_records_versions_and_machine():
    record = env.collect("cpu")
    json.dumps(record)  # env.json must serialise
    assert record["posbench_version"] and record["python"].count(".") == 2
    assert record["torch"] and record["cpu_count"] >= 1 and record["torch_threads"] >= 1
    assert len(record["git_commit"]) == 40 or record["git_commit"] == "unknown"
    assert record["nvml"] == env.NVML_UNAVAILABLE and record["device"] == "cpu"
    assert record["triton"] and record["cuda"] and record["cudnn"]


def test_collect_records_the_methods_path_a_run_could_load_methods_from(monkeypatch):
    """POSBENCH_METHODS_PATH goes into env.json (``methods_path``): ``publish`` refuses a run whose
    folders lie outside the repository, so the record must say which they were (issue 69)."""
    monkeypatch.setenv("POSBENCH_METHODS_PATH", os.pathsep.join(["/home/me/my_methods", " ", "plugins "]))
    assert env.collect("cpu")["methods_path"] == ["/home/me/my_methods", "plugins"]
    monkeypatch.delenv("POSBENCH_METHODS_PATH")
    assert env.collect("cpu")["methods_path"] == []


# -- how busy the machine is (env.json "machine"), with a fake /proc, /sys and NVML -----------------


def _fake_proc(root, ticks: dict):
    """``root/<pid>/stat`` for pid -> (name, utime+stime ticks); split over utime and stime."""
    for pid, (name, t) in ticks.items():
        d = root / str(pid)
        d.mkdir(parents=True, exist_ok=True)
        # fields after "(comm)": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
        (d / "stat").write_text(f"{pid} ({name}) R 1 1 1 0 -1 0 0 0 0 0 {t - t // 2} {t // 2} 0 0 20 0 1\n")
    (root / "self").mkdir(exist_ok=True)  # non-numeric entries are skipped


def test_busy_processes_counts_other_processes_using_a_quarter_core(tmp_path):
    proc = tmp_path / "proc"
    _fake_proc(proc, {10: ("python", 100), 11: ("idle daemon", 100), 12: ("make (x)", 100), 13: ("me", 0)})

    def sleep(_s):  # between the two samples: pid 10 uses 0.9 core, 12 half a core, 13 (us) a whole core
        _fake_proc(proc, {10: ("python", 145), 11: ("idle daemon", 102), 12: ("make (x)", 125), 13: ("me", 50)})

    busy = env.busy_processes(proc, sample_s=0.5, exclude={13}, sleep=sleep, ticks_per_s=100)
    assert busy == [{"pid": 10, "name": "python", "cpu": 0.9}, {"pid": 12, "name": "make (x)", "cpu": 0.5}]


def test_cpu_frequency_where_readable(tmp_path):
    for i, khz in ((0, 2_400_000), (1, 3_000_000)):
        d = tmp_path / f"cpu{i}" / "cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_governor").write_text("performance\n")
        (d / "scaling_cur_freq").write_text(f"{khz}\n")
    assert env.cpu_frequency(tmp_path) == {"governor": "performance", "mhz": [2400, 3000]}
    assert env.cpu_frequency(tmp_path / "none").startswith("unreadable")


def test_other_gpu_processes_from_nvml(monkeypatch):
    fake, _ = make_pynvml()
    me = types.SimpleNamespace(pid=__import__("os").getpid(), usedGpuMemory=1 << 30)
    other = types.SimpleNamespace(pid=424242, usedGpuMemory=2 << 30)
    fake.nvmlDeviceGetComputeRunningProcesses = lambda h: [me, other]
    fake.nvmlDeviceGetGraphicsRunningProcesses = lambda h: []
    assert env.gpu_processes(fake, "gpu0") == [{"pid": 424242, "used_bytes": 2 << 30}]

    def unsupported(h):
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    fake.nvmlDeviceGetGraphicsRunningProcesses = unsupported
    assert env.gpu_processes(fake, "gpu0") == "unsupported by this driver"


def test_machine_state_warning_and_record(tmp_path, monkeypatch):
    fake, _ = make_pynvml()
    fake.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=424242, usedGpuMemory=None)]
    fake.nvmlDeviceGetGraphicsRunningProcesses = lambda h: []
    monkeypatch.setattr(env, "busy_processes", lambda proc, sample_s, share: [])
    monkeypatch.setattr(env.os, "getloadavg", lambda: (0.5, 1.0, 0.5))
    monkeypatch.setattr(env.os, "cpu_count", lambda: 2)
    state = env.machine_state("cuda", nvml=fake, handle="gpu0", sys_cpu=tmp_path)
    assert state["busy"] and state["gpu_processes"] == [{"pid": 424242, "used_bytes": None}]
    assert state["load_avg"] == [0.5, 1.0, 0.5] and state["n_busy_processes"] == 0 and state["other_cpu"] == 0
    assert env.busy_warning(state) == (
        "warning: the machine is busy (1 other process(es) on the GPU; load average 0.5 on 2 CPUs); speed numbers will be noisy"
    )
    cpu = env.machine_state("cpu", sys_cpu=tmp_path)
    assert "gpu_processes" not in cpu and cpu["busy"] is False and env.busy_warning(cpu) is None
    # One process at a full core; or many at a fifth each (none alone busy); or a high load average.
    one = [{"pid": 9, "name": "stress", "cpu": 1.0}]
    many = [{"pid": p, "name": "python", "cpu": 0.2} for p in range(5)]
    for active, load, names in ((one, 0.5, ["stress"]), (many, 0.5, []), ([], 2.5, [])):
        monkeypatch.setattr(env, "busy_processes", lambda proc, sample_s, share, a=active: a)
        monkeypatch.setattr(env.os, "getloadavg", lambda x=load: (x, 1.0, 0.5))
        state_ = env.machine_state("cpu", sys_cpu=tmp_path)
        assert state_["busy"] and [p["name"] for p in state_["busy_processes"]] == names
    assert state_["load_avg"][0] == 2.5
    monkeypatch.setattr(env, "busy_processes", lambda proc, sample_s, share: one)
    assert "1 other busy process(es): stress (100% of a core); other processes used 1.00 cores" in env.busy_warning(
        env.machine_state("cpu", sys_cpu=tmp_path)
    )

    (tmp_path / "env.json").write_text(json.dumps({"cpu": "x"}))
    env.record_machine(tmp_path, "start", cpu)
    env.record_machine(tmp_path, "end", state)
    written = json.loads((tmp_path / "env.json").read_text())
    assert written["cpu"] == "x" and written["machine"]["start"]["busy"] is False
    assert env.was_busy(written) and not env.was_busy({"machine": {"start": cpu}}) and not env.was_busy({})


def test_cpu_identity_names_the_vendor_and_the_vector_flags(tmp_path):
    """Issue 59: a reader must tell an AMD number from an Intel one, and see the vector paths."""
    import torch

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum\n"
        "flags\t\t: fpu sse2 avx2 avx512f avx512_fp16 amx_tile amx_bf16\n\n"
        "processor\t: 1\nvendor_id\t: GenuineIntel\nflags\t\t: fpu\n"
    )
    identity = env.cpu_identity(cpuinfo)
    assert identity["cpu_vendor"] == "GenuineIntel"
    assert identity["cpu_extensions"] == ["avx2", "avx512f", "avx512_fp16", "amx_tile", "amx_bf16"]
    assert identity["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    missing = env.cpu_identity(tmp_path / "absent")  # no /proc: the machine's name, no flags
    assert missing["cpu_vendor"] and missing["cpu_extensions"] == []
    record = env.collect("cpu")
    assert {"cpu_vendor", "cpu_capability", "cpu_extensions"} <= set(record)


# What a run folder says about where posbench came from, and who may read it (issue 42, item 6): the
# commit only when posbench runs from its own checkout (a wheel inside some other git repository
# records its installed version), every file a run and its report write with the umask's mode (0644
# under umask 022, never mkstemp's 0600), and no "CUDA not built with CUDA".


REPO = Path(__file__).resolve().parents[2]
GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed: no repository to ask")


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t", *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def _repo(folder: Path) -> str:
    """``folder`` made a git repository with one commit of what it holds; that commit."""
    _git(folder, "init", "-q")
    _git(folder, "add", "-A")
    _git(folder, "commit", "-q", "-m", "x")
    return _git(folder, "rev-parse", "HEAD")


@needs_git
def test_a_wheel_inside_another_repository_records_its_version_not_that_commit(tmp_path):
    project = tmp_path / "project"  # somebody's repository, with posbench installed in its venv
    package = project / ".venv" / "lib" / "python3.12" / "site-packages" / "posbench"
    shutil.copytree(REPO / "posbench" / "engine", package / "engine")
    (project / "README.md").write_text("someone else's project\n")
    foreign = _repo(project)
    assert env.own_checkout(package) is None
    got = env.provenance(package)
    assert got["git_commit"] == f"v{env.installed_version()}" != foreign
    assert got["git_dirty"] is None and got["posbench_source"].startswith("installed package, version ")
    # the same, with the package right at the other repository's top level: still not posbench's own
    (project / "posbench").mkdir()
    (project / "bench.py").write_text("")
    (project / "pyproject.toml").write_text('[project]\nname = "not-posbench"\n')
    assert env.own_checkout(project / "posbench") is None


@needs_git
def test_posbench_run_from_its_own_checkout_records_the_commit(tmp_path):
    top = tmp_path / "posbench-clone"
    (top / "posbench").mkdir(parents=True)
    (top / "posbench" / "__init__.py").write_text("")
    (top / "bench.py").write_text("")
    (top / "pyproject.toml").write_text('[project]\nname = "posbench"\nversion = "0.1.0"\n')
    commit = _repo(top)
    assert env.own_checkout(top / "posbench") == top
    assert env.provenance(top / "posbench") == {
        "git_commit": commit,
        "git_dirty": False,
        "posbench_source": f"git checkout {top}",
    }
    (top / "bench.py").write_text("# changed\n")
    assert env.provenance(top / "posbench")["git_dirty"] is True
    # a copy of the checkout without its .git: no commit to record
    shutil.rmtree(top / ".git")
    assert env.provenance(top / "posbench")["git_commit"] == f"v{env.installed_version()}"


def test_installed_version_falls_back_to_the_package_version(monkeypatch):
    import importlib.metadata

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert env.installed_version() == __version__
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "9.9.9")
    assert env.installed_version() == "9.9.9"


def test_env_json_never_says_not_built_with_cuda(monkeypatch):
    import torch

    monkeypatch.setattr(torch.version, "cuda", None)
    record = env.collect("cpu")
    assert record["cuda"] == env.NO_CUDA == "none (a CPU-only build of torch)"
    assert "not built with" not in json.dumps(record)
    assert {"git_commit", "git_dirty", "posbench_source"} <= set(record)


@pytest.fixture
def umask():
    """``umask(mask)`` sets this process's umask (inherited by workers) for one test."""
    before = os.umask(0o022)
    os.umask(before)
    yield lambda mask: os.umask(mask)
    os.umask(before)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_atomic_writes_get_the_mode_open_would_give(tmp_path, umask, mask):
    umask(mask)
    assert files.current_umask() == mask and files.new_file_mode() == 0o666 & ~mask
    path = files.atomic_write_text(tmp_path / "x.json", "{}")
    fd = files.open_nofollow(tmp_path / "rows.jsonl", os.O_WRONLY | os.O_CREAT)
    os.close(fd)
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE((tmp_path / "rows.jsonl").stat().st_mode) == 0o666 & ~mask


def _modes(folder: Path) -> dict[str, int]:
    """{relative path: permission bits} of every file under ``folder`` (hidden ones too)."""
    return {str(p.relative_to(folder)): stat.S_IMODE(p.stat().st_mode) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.subprocess  # a run: a worker process per case
@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o027, 0o640)])
def test_every_file_a_run_and_its_report_write_follows_the_umask(tmp_path, umask, mask, mode, capsys):
    make_suite(tmp_path, ["sinusoidal", "alibi"], grid="[1, 2]", rounds=2)
    umask(mask)
    run_dir = tmp_path / "res" / "t" / "r"
    assert (
        cli.main(
            [
                "--suite",
                str(tmp_path / "t.yaml"),
                "--device",
                "cpu",
                "--results",
                str(tmp_path / "res"),
                "--quiet",
                "--run-id",
                "r",
            ]
        )
        == 0
    )
    assert cli.main(["report", str(run_dir), "--out", str(tmp_path / "report")]) == 0
    written = _modes(run_dir)
    assert {"table.md", "table.csv", "env.json", "run.json", "cases.jsonl"} <= set(written)
    reported = _modes(tmp_path / "report")
    assert "report.html" in reported and any(name.endswith(".png") for name in reported)
    assert {name: m for name, m in {**written, **reported}.items() if m != mode} == {}
