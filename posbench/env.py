"""The environment a run measured in, written as ``env.json`` beside ``cases.jsonl``.

Nothing here may crash a run: a missing tool or library becomes a string saying so. GPU details
come from NVML (``import pynvml``, from the nvidia-ml-py package); without CUDA or NVML the
``nvml`` entry is the string ``NVML_UNAVAILABLE``.
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import __version__

REPO = Path(__file__).resolve().parent.parent
NVML_UNAVAILABLE = "unavailable: needs CUDA and NVML (pip install nvidia-ml-py)"


def git_commit(repo: Path = REPO) -> tuple[str, bool | None]:
    """(commit hash or "unknown", dirty flag or None)."""
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip() != ""
        return commit, dirty
    except (OSError, subprocess.SubprocessError):
        return "unknown", None


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


def collect(device: str) -> dict[str, Any]:
    import torch

    commit, dirty = git_commit()
    cuda = torch.cuda.is_available()
    return {
        "posbench_version": __version__,
        "git_commit": commit,
        "git_dirty": dirty,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "not built with CUDA",
        "cudnn": str(torch.backends.cudnn.version()) if cuda and torch.backends.cudnn.is_available() else "not available",
        "triton": _version("triton"),
        "os": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": device,
        "gpu": torch.cuda.get_device_name() if cuda and device == "cuda" else None,
        "nvml": nvml_info() if device == "cuda" else NVML_UNAVAILABLE,
    }
