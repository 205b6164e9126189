"""The environment a run measured in, written as ``env.json`` beside ``cases.jsonl``. Nothing
here may crash a run: a missing tool or library (NVML, from nvidia-ml-py) becomes a string saying so.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from posbench import __version__
from posbench.core.registry import METHODS_ENV_PATH
from posbench.engine import tracking

PACKAGE = Path(__file__).resolve().parents[1]  # the posbench package this code runs from
REPO = PACKAGE.parent
NVML_UNAVAILABLE = "unavailable: needs CUDA and NVML (pip install nvidia-ml-py)"
NO_CUDA = "none (a CPU-only build of torch)"  # env.json's "cuda" for such a build; reports print "CUDA none (...)"


def git_commit(repo: Path = REPO) -> tuple[str, bool | None]:
    """(commit hash or "unknown", dirty flag or None)."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = (
            subprocess.run(
                ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout.strip()
            != ""
        )
        return commit, dirty
    except (OSError, subprocess.SubprocessError):
        return "unknown", None


def own_checkout(package: Path = PACKAGE) -> Path | None:
    """The top level of posbench's own git checkout when ``package`` is its ``posbench/``, else
    None. A wheel in ``site-packages`` inside some other repository (a project's ``.venv``) must
    not record that repository's commit: the top level must hold ``bench.py`` and a
    ``pyproject.toml`` naming posbench, and be git's top level."""
    top = package.parent
    try:
        named = re.search(r'^name\s*=\s*"posbench"\s*$', (top / "pyproject.toml").read_text(encoding="utf-8"), re.M)
    except (OSError, UnicodeDecodeError):
        return None
    if package.name != "posbench" or not named or not (top / "bench.py").is_file():
        return None
    try:
        shown = subprocess.run(
            ["git", "-C", str(top), "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return top if shown and Path(shown).resolve() == top.resolve() else None


def installed_version() -> str:
    """posbench's version as installed (its distribution's metadata), else ``posbench.__version__``."""
    try:
        return importlib.metadata.version("posbench")
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return __version__


def provenance(package: Path = PACKAGE) -> dict[str, Any]:
    """env.json's ``git_commit``, ``git_dirty`` and ``posbench_source``: the commit when posbench runs
    from its own checkout (``own_checkout``), else ``v<installed version>`` (rows and reports
    show it where a commit goes) with ``git_dirty`` None."""
    top = own_checkout(package)
    if top is not None:
        commit, dirty = git_commit(top)
        if commit != "unknown":
            return {"git_commit": commit, "git_dirty": dirty, "posbench_source": f"git checkout {top}"}
    version = installed_version()
    return {
        "git_commit": f"v{version}",
        "git_dirty": None,
        "posbench_source": f"installed package, version {version} (not a git checkout of posbench)",
    }


def methods_path() -> list[str]:
    """env.json's ``methods_path``: the folders of ``POSBENCH_METHODS_PATH`` as set for the run
    (``[]`` when unset), where its methods could come from besides the repository's ``methods/``;
    ``bench.py publish`` refuses a run whose folders lie outside the repository (issue 69)."""
    return [entry.strip() for entry in os.environ.get(METHODS_ENV_PATH, "").split(os.pathsep) if entry.strip()]


def _version(module: str) -> str:
    try:
        mod = __import__(module)
        return str(getattr(mod, "__version__", "installed"))
    except Exception:  # a broken install must not stop a run; say what happened instead
        return "not installed"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# CPU flags that change what a method costs on a CPU: torch's vector kernels (AVX2, AVX-512) and its
# bfloat16/float16 and matrix (AMX) paths. An AMD number and an Intel one can differ for reasons that
# are not the method's (issue 59: subnormals cost ALiBi 2.6x on an Intel Xeon), so env.json says which.
VECTOR_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")


def cpu_identity(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    """``cpu_vendor`` (``vendor_id``: AuthenticAMD, GenuineIntel), ``cpu_capability`` (the vector
    kernels torch's CPU ops dispatch to, e.g. AVX512) and ``cpu_extensions`` (``VECTOR_FLAGS`` the
    CPU has)."""
    import torch

    vendor, flags = "", set()
    try:
        with open(cpuinfo) as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() == "vendor_id" and not vendor:
                    vendor = value.strip()
                elif key.strip() in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return {
        "cpu_vendor": vendor or platform.machine() or "unknown",
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_extensions": [f for f in VECTOR_FLAGS if f in flags],
    }


def subnormals_flushed() -> bool:
    """Whether torch's CPU float ops flush subnormals to zero now (``set_flush_denormal`` has no
    getter): half the smallest normal float32 comes out zero only then."""
    import torch

    return (torch.tensor([torch.finfo(torch.float32).tiny]) * 0.5).item() == 0.0


def can_flush_subnormals() -> bool:
    """Whether this CPU flushes subnormals when asked (x86 with SSE3: DAZ and FTZ), the flush left
    as it was."""
    import torch

    was = subnormals_flushed()
    able = torch.set_flush_denormal(True)
    torch.set_flush_denormal(was)
    return able


def nvml_device_index() -> int:
    """NVML numbers all GPUs, CUDA only the visible ones: map a single CUDA_VISIBLE_DEVICES entry."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible.isdigit():
        return int(visible)
    import torch

    return torch.cuda.current_device() if torch.cuda.is_available() else 0


def open_nvml(index: int | None = None):
    """(pynvml module, device handle), or (None, reason) when there is no NVML or no GPU."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(nvml_device_index() if index is None else index)
    except Exception:  # ImportError, NVMLError_LibraryNotFound, no driver: all mean "no NVML here"
        return None, NVML_UNAVAILABLE


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_info(index: int | None = None) -> dict[str, Any] | str:
    """What NVML says about the GPU, or ``NVML_UNAVAILABLE``. A query a GPU does not support is
    recorded as ``"unsupported"`` rather than dropped, so every key is always present."""
    nvml, handle = open_nvml(index)
    if nvml is None:
        return NVML_UNAVAILABLE

    def ask(fn, *args, scale=1.0):
        try:
            value = getattr(nvml, fn)(handle, *args)
            return value / scale if scale != 1.0 else value
        except Exception:
            return "unsupported"

    clock = nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM
    mem = ask("nvmlDeviceGetMemoryInfo")
    return {
        "name": _text(ask("nvmlDeviceGetName")),
        "driver": _text(nvml.nvmlSystemGetDriverVersion()),
        "memory_total_bytes": getattr(mem, "total", mem),
        "sm_clock_mhz": ask("nvmlDeviceGetClockInfo", clock[0]),
        "sm_clock_max_mhz": ask("nvmlDeviceGetMaxClockInfo", clock[0]),
        "mem_clock_mhz": ask("nvmlDeviceGetClockInfo", clock[1]),
        "mem_clock_max_mhz": ask("nvmlDeviceGetMaxClockInfo", clock[1]),
        "power_limit_w": ask("nvmlDeviceGetPowerManagementLimit", scale=1000.0),  # mW -> W
        "temperature_c": ask("nvmlDeviceGetTemperature", nvml.NVML_TEMPERATURE_GPU),
    }


def collect(device: str, flush_denormal: bool = True) -> dict[str, Any]:
    """env.json of a run on ``device`` whose workers ask for the subnormal flush ``flush_denormal``
    (its setting; ``flush_denormal`` here: whether they get it, issue 59)."""
    import torch

    cuda = torch.cuda.is_available()
    return {
        "posbench_version": installed_version(),
        **provenance(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda or NO_CUDA,
        "cudnn": str(torch.backends.cudnn.version()) if cuda and torch.backends.cudnn.is_available() else "not available",
        "triton": _version("triton"),
        "os": platform.platform(),
        "cpu": cpu_model(),
        **cpu_identity(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "flush_denormal": flush_denormal and can_flush_subnormals(),
        "device": device,
        "gpu": torch.cuda.get_device_name() if cuda and device == "cuda" else None,
        "nvml": nvml_info() if device == "cuda" else NVML_UNAVAILABLE,
        "tracking": tracking.status(),  # training curves' writers, or "absent: ..." (one line)
        "methods_path": methods_path(),
    }


# ---------------------------------------------------------------------------------------------
# How busy the machine is: recorded at the start and end of a run (``env.json`` "machine")

BUSY_SHARE = 0.25  # a process using a quarter of a core or more during the sample is "busy"
BUSY_TOTAL = 0.5  # ... and so is a machine where other processes together use half a core
SAMPLE_S = 0.5


def _proc_ticks(proc: Path) -> dict[int, tuple[str, int]]:
    """pid -> (command name, user + system clock ticks so far), from ``<proc>/<pid>/stat``."""
    out = {}
    for entry in proc.iterdir() if proc.is_dir() else []:
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:  # the process ended between listing and reading
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split at the last ")".
        head, _, rest = text.rpartition(")")
        fields_ = rest.split()
        if len(fields_) < 13:
            continue
        out[int(entry.name)] = (head.partition("(")[2], int(fields_[11]) + int(fields_[12]))
    return out


def _own_pids() -> set[int]:
    """This process and its ancestors (the shell, make, ...): never "other" processes."""
    pids, pid = {os.getpid()}, os.getppid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def busy_processes(
    proc: Path = Path("/proc"),
    sample_s: float = SAMPLE_S,
    exclude: set[int] | None = None,
    sleep=None,
    ticks_per_s: float | None = None,
    share: float = BUSY_SHARE,
) -> list[dict]:
    """Other processes that used at least ``share`` of a core over ``sample_s`` seconds:
    ``[{"pid", "name", "cpu"}]`` (cpu in cores, 1.0 = one core), busiest first."""
    import time

    exclude = _own_pids() if exclude is None else exclude
    hz = ticks_per_s or (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)
    before = _proc_ticks(proc)
    (sleep or time.sleep)(sample_s)
    after = _proc_ticks(proc)
    out = []
    for pid, (name, ticks) in after.items():
        if pid in exclude or pid not in before:
            continue
        cores = (ticks - before[pid][1]) / hz / sample_s
        if cores >= share and cores > 0:
            out.append({"pid": pid, "name": name, "cpu": round(cores, 2)})
    return sorted(out, key=lambda p: -p["cpu"])


def cpu_frequency(sys_cpu: Path = Path("/sys/devices/system/cpu")) -> dict[str, Any] | str:
    """The cpufreq governor and current frequency of each CPU, where the kernel exposes them."""
    governors, mhz = set(), []
    for folder in sorted(sys_cpu.glob("cpu[0-9]*/cpufreq")):
        try:
            governors.add((folder / "scaling_governor").read_text().strip())
        except OSError:
            pass
        try:
            mhz.append(round(int((folder / "scaling_cur_freq").read_text()) / 1000))  # kHz -> MHz
        except (OSError, ValueError):
            pass
    if not governors and not mhz:
        return "unreadable: no cpufreq in /sys (a virtual machine or container)"
    return {"governor": ", ".join(sorted(governors)) or "unreadable", "mhz": mhz}


def gpu_processes(nvml=None, handle=None) -> list[dict] | str:
    """Other processes with a context on the GPU (NVML): ``[{"pid", "used_bytes"}]``."""
    if nvml is None:
        nvml, handle = open_nvml()
        if nvml is None:
            return NVML_UNAVAILABLE
    mine = _own_pids()
    found = {}
    for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        try:
            for p in getattr(nvml, fn)(handle):
                if p.pid not in mine:
                    used = getattr(p, "usedGpuMemory", None)
                    found[p.pid] = {"pid": p.pid, "used_bytes": used if isinstance(used, int) else None}
        except Exception:  # a query this driver does not support: say so, do not fail the run
            return "unsupported by this driver"
    return list(found.values())


def machine_state(
    device: str,
    proc: Path = Path("/proc"),
    sample_s: float = SAMPLE_S,
    nvml=None,
    handle=None,
    sys_cpu: Path = Path("/sys/devices/system/cpu"),
) -> dict[str, Any]:
    """Load average, other busy processes, CPU frequency and (CUDA) other GPU processes, now;
    ``busy`` when one process used ``BUSY_SHARE`` of a core, all ``BUSY_TOTAL``, the load average
    exceeds the CPUs, or another process holds the GPU."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    active = busy_processes(proc, sample_s, share=0.0)
    others = [p for p in active if p["cpu"] >= BUSY_SHARE]
    other_cpu = round(sum(p["cpu"] for p in active), 2)
    state: dict[str, Any] = {
        "load_avg": load,
        "cpu_count": os.cpu_count(),
        "busy_processes": others,
        "n_busy_processes": len(others),
        "other_cpu": other_cpu,
        "cpu_freq": cpu_frequency(sys_cpu),
    }
    # Many processes sharing few cores each get less than BUSY_SHARE: their sum and the load
    # average (more runnable threads than cores) catch that.
    busy = bool(others) or other_cpu >= BUSY_TOTAL or bool(load and load[0] > (os.cpu_count() or 1))
    if device == "cuda":
        gpu = gpu_processes(nvml, handle) if nvml is not None else gpu_processes()
        state["gpu_processes"] = gpu
        busy = busy or (isinstance(gpu, list) and bool(gpu))
    state["busy"] = busy
    return state


def busy_warning(state: dict[str, Any]) -> str | None:
    """One line saying the machine is busy, or None when it is not."""
    if not state.get("busy"):
        return None
    parts = []
    others = state.get("busy_processes") or []
    if others:
        names = ", ".join(f"{p['name']} ({p['cpu']:.0%} of a core)" for p in others[:3])
        parts.append(f"{len(others)} other busy process(es): {names}")
    if state.get("other_cpu"):
        parts.append(f"other processes used {state['other_cpu']:.2f} cores")
    gpu = state.get("gpu_processes")
    if isinstance(gpu, list) and gpu:
        parts.append(f"{len(gpu)} other process(es) on the GPU")
    load = state.get("load_avg")
    if load:
        parts.append(f"load average {load[0]} on {state.get('cpu_count')} CPUs")
    return "warning: the machine is busy (" + "; ".join(parts) + "); speed numbers will be noisy"


def record_machine(run_dir: Path, when: str, state: dict[str, Any]) -> None:
    """Add ``state`` to ``run_dir/env.json`` as ``machine[when]`` (``start``/``end``), atomically."""
    import json

    from posbench.core.files import atomic_write_text

    path = Path(run_dir) / "env.json"
    try:
        env = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        env = {}
    if not isinstance(env, dict):
        env = {}
    machine = env.get("machine") if isinstance(env.get("machine"), dict) else {}
    machine[when] = state
    env["machine"] = machine
    atomic_write_text(path, json.dumps(env, indent=2) + "\n")


def was_busy(env: dict) -> bool:
    """Whether a run's env.json says the machine was busy at its start or end."""
    machine = env.get("machine") if isinstance(env, dict) else None
    if not isinstance(machine, dict):
        return False
    return any(isinstance(s, dict) and s.get("busy") for s in machine.values())
