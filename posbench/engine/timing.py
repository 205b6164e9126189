"""Timing, peak memory and energy, behind a small device boundary.

Every CUDA call the harness makes for measuring lives in ``CudaDevice``, ``EnergyMeter`` and
``PowerSampler``, so tests drive those paths on a CPU with fakes (``torch.cuda``, ``pynvml``).
What each clock, peak and energy source measures: docs/measuring-speed.md.
"""

from __future__ import annotations

import resource
import statistics
import sys
import threading
import time
from collections.abc import Callable

import torch


def summarize(values: list[float]) -> tuple[float, float, float]:
    """(median, min, max)."""
    return statistics.median(values), min(values), max(values)


class CpuDevice:
    kind = "cpu"

    def __init__(self):
        # False where /proc/self/clear_refs is not writable: peaks are then ru_maxrss, since start.
        self.peak_resettable = self._clear_refs()

    def synchronize(self) -> None:
        pass

    def time_window(self, step: Callable[[], None], steps: int) -> float:
        """Seconds for ``steps`` calls of ``step``."""
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        return time.perf_counter() - t0

    @staticmethod
    def _clear_refs() -> bool:
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")  # 5: reset the peak RSS (VmHWM) to the current RSS
            return True
        except OSError:
            return False

    def reset_peak(self) -> None:
        self.peak_resettable = self._clear_refs()

    @staticmethod
    def _status(field: str) -> int | None:
        """A byte count from /proc/self/status (VmHWM: peak resident, VmRSS: resident now)."""
        try:
            with open("/proc/self/status") as fh:
                for line in fh:
                    if line.startswith(field + ":"):
                        return int(line.split()[1]) * 1024  # kB
        except OSError:
            pass
        return None

    def in_use(self) -> int | None:
        """Resident bytes now: the Python and torch runtime, the model and the data."""
        return self._status("VmRSS")

    def peak(self) -> dict[str, int | None]:
        """Peak resident bytes since ``reset_peak`` (or since the process started)."""
        hwm = self._status("VmHWM")
        if hwm is None:
            # ru_maxrss: kilobytes on Linux, bytes on macOS.
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            hwm = rss if sys.platform == "darwin" else rss * 1024
        return {"allocated": hwm, "reserved": None}


class CudaDevice:
    kind = "cuda"
    peak_resettable = True

    def __init__(self, index: int | None = None):
        self.index = torch.cuda.current_device() if index is None else index

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.index)

    def time_window(self, step: Callable[[], None], steps: int) -> float:
        """Seconds of GPU time between two events around ``steps`` steps."""
        self.synchronize()  # nothing queued before the window may count
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0  # ms -> s

    def reset_peak(self) -> None:
        self.synchronize()
        torch.cuda.reset_peak_memory_stats(self.index)

    def in_use(self) -> int | None:
        self.synchronize()
        return int(torch.cuda.memory_allocated(self.index))

    def peak(self) -> dict[str, int | None]:
        self.synchronize()
        return {
            "allocated": int(torch.cuda.max_memory_allocated(self.index)),
            "reserved": int(torch.cuda.max_memory_reserved(self.index)),
        }


def make_device(kind: str):
    if kind == "cuda":
        return CudaDevice()
    if kind == "cpu":
        return CpuDevice()
    raise ValueError(f"unknown device {kind!r}; allowed: cpu, cuda")


ENERGY_COUNTER = "nvml-energy-counter"
POWER_SAMPLING = "nvml-power-sampling"
ENERGY_NEEDS_CUDA = "unavailable: needs CUDA"
# pynvml's error classes meaning "this GPU or driver has no such counter": fall back to sampling.
_NOT_SUPPORTED = ("NVMLError_NotSupported", "NVMLError_FunctionNotFound")


def _not_supported(nvml, exc: BaseException) -> bool:
    classes = tuple(c for c in (getattr(nvml, name, None) for name in _NOT_SUPPORTED) if isinstance(c, type))
    return isinstance(exc, classes) if classes else False


def energy_source(nvml, handle, device: str = "cuda") -> str:
    """How energy is measured here: ``ENERGY_COUNTER``, ``POWER_SAMPLING`` (the counter's probe
    answers NotSupported/FunctionNotFound), or ``unavailable: <why>``, never an exception."""
    if device != "cuda":
        return ENERGY_NEEDS_CUDA
    if nvml is None:
        from posbench.engine.env import NVML_UNAVAILABLE

        return NVML_UNAVAILABLE
    read = getattr(nvml, "nvmlDeviceGetTotalEnergyConsumption", None)
    if read is None:  # a pynvml older than the call
        return POWER_SAMPLING
    try:
        read(handle)
    except Exception as exc:  # pynvml's NVMLError (nvml.NVMLError), or whatever a broken binding raises
        if _not_supported(nvml, exc):
            return POWER_SAMPLING
        reason = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"unavailable: NVML energy counter: {reason}"
    return ENERGY_COUNTER


class EnergyMeter:
    """Joules per measured window (``with meter: <one window>``): ``windows`` (None where not
    measured), ``last_j``, and ``energy_j`` their sum, None when any window lacks a number.
    ``synchronize`` runs before each counter read, so the window holds exactly its own work."""

    def __init__(
        self,
        nvml,
        handle,
        interval_s: float = 0.1,
        synchronize: Callable[[], None] | None = None,
        device: str = "cuda",
        source: str | None = None,
    ):
        self.nvml, self.handle, self.interval_s = nvml, handle, interval_s
        self.synchronize = synchronize or (lambda: None)
        self.source = source or energy_source(nvml, handle, device)
        self.windows: list[float | None] = []
        self._start_mj: int | None = None
        self._sampler: PowerSampler | None = None

    @property
    def available(self) -> bool:
        return self.source in (ENERGY_COUNTER, POWER_SAMPLING)

    def _read_mj(self) -> int:
        self.synchronize()
        return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))

    def __enter__(self):
        if self.source == ENERGY_COUNTER:
            self._start_mj = self._read_mj()
        elif self.source == POWER_SAMPLING:
            self._sampler = PowerSampler(self.nvml, self.handle, self.interval_s).__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.source == ENERGY_COUNTER:
            if exc_type is None:
                delta_mj = self._read_mj() - self._start_mj
                # A negative delta: the counter restarted (driver reloaded) inside the window.
                self.windows.append(delta_mj / 1000.0 if delta_mj >= 0 else None)
        elif self._sampler is not None:
            self._sampler.__exit__(exc_type, exc, tb)
            if exc_type is None:
                self.windows.append(self._sampler.energy_j)
            self._sampler = None
        elif exc_type is None:
            self.windows.append(None)
        return False

    @property
    def last_j(self) -> float | None:
        return self.windows[-1] if self.windows else None

    @property
    def energy_j(self) -> float | None:
        if not self.available or not self.windows or any(j is None for j in self.windows):
            return None
        return sum(self.windows)


class PowerSampler:
    """``EnergyMeter``'s fallback: board power sampled every ``interval_s`` in a thread
    (``samples``: [(t_s, watts)]); ``energy_j`` integrates them (trapezoid), None without NVML."""

    def __init__(self, nvml, handle, interval_s: float = 0.1):
        self.nvml, self.handle, self.interval_s = nvml, handle, interval_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read(self) -> None:
        watts = self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0  # NVML reports milliwatts
        self.samples.append((time.perf_counter(), watts))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._read()

    def __enter__(self):
        if self.nvml is not None:
            self._read()
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._read()  # a sample at the very end, so short phases still have two
        return False

    @property
    def energy_j(self) -> float | None:
        if len(self.samples) < 2:
            return None
        total = 0.0
        for (t0, w0), (t1, w1) in zip(self.samples, self.samples[1:]):
            total += (t1 - t0) * (w0 + w1) / 2
        return total
