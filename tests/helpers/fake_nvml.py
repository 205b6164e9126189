"""A fake ``pynvml`` for the energy paths: a GPU drawing constant power on a fake clock.

``FakeNvml(watts)`` answers ``nvmlDeviceGetPowerUsage`` (milliwatts) and
``nvmlDeviceGetTotalEnergyConsumption`` (millijoules since "driver load"), the counter advancing
with ``now_s``, which only ``advance`` moves: a window of dt seconds adds watts * dt joules,
exactly. ``counter`` picks what the counter call does: "ok", "not-supported" (a pre-Volta GPU),
"function-not-found" (an old driver), "no-permission" (any other NVML error), or "absent" (a
pynvml without the call). ``calls`` records every NVML call by name, in order.
``FakeCudaClock`` is the device side: a ``time_window`` that runs the steps and moves the clock.
"""

from __future__ import annotations

import time


class NVMLError(Exception):
    """pynvml's base error; its str is NVML's message ("Not Supported")."""


class NVMLError_NotSupported(NVMLError):  # noqa: N801 (pynvml's names)
    def __str__(self):
        return "Not Supported"


class NVMLError_FunctionNotFound(NVMLError):  # noqa: N801
    def __str__(self):
        return "Function Not Found"


class NVMLError_NoPermission(NVMLError):  # noqa: N801
    def __str__(self):
        return "Insufficient Permissions"


COUNTER_FAULTS = {
    "not-supported": NVMLError_NotSupported,
    "function-not-found": NVMLError_FunctionNotFound,
    "no-permission": NVMLError_NoPermission,
}


class FakeNvml:
    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVMLError_NoPermission = NVMLError_NoPermission

    def __init__(self, watts: float = 250.0, counter: str = "ok", start_mj: int = 123_456_789):
        self.watts, self.counter, self.start_mj = watts, counter, start_mj
        self.now_s = 0.0
        self.calls: list[str] = []
        if counter == "absent":
            self.nvmlDeviceGetTotalEnergyConsumption = None  # getattr(nvml, name, None) -> None

    def advance(self, seconds: float) -> None:
        self.now_s += seconds

    def nvmlDeviceGetPowerUsage(self, handle) -> int:
        assert handle == "gpu0"
        self.calls.append("power")
        return int(self.watts * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle) -> int:  # noqa: F811 (None when "absent")
        assert handle == "gpu0"
        self.calls.append("energy")
        if self.counter in COUNTER_FAULTS:
            raise COUNTER_FAULTS[self.counter]()
        return self.start_mj + round(self.watts * self.now_s * 1000)


class FakeCudaClock:
    """A device of kind "cuda" whose windows take ``window_s`` on the fake NVML clock (and
    ``real_s`` of real time, for the power sampler's thread). Synchronizes are counted."""

    kind = "cuda"
    peak_resettable = True

    def __init__(self, nvml: FakeNvml, window_s: float = 0.5, real_s: float = 0.0):
        self.nvml, self.window_s, self.real_s = nvml, window_s, real_s
        self.syncs = 0

    def synchronize(self) -> None:
        self.syncs += 1
        self.nvml.calls.append("synchronize")

    def time_window(self, step, steps: int) -> float:
        for _ in range(steps):
            step()
        if self.real_s:
            time.sleep(self.real_s)
        self.nvml.advance(self.window_s)
        return self.window_s

    def reset_peak(self) -> None:
        pass

    def in_use(self):
        return 1 << 20

    def peak(self):
        return {"allocated": 2 << 20, "reserved": 3 << 20}
