"""env.json: versions and machine, and NVML through a fake pynvml module."""
import json
import sys
import types

from posbench import env


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
        NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2, NVML_TEMPERATURE_GPU=0,
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
        "name": "NVIDIA H100 80GB HBM3", "driver": "550.54", "memory_total_bytes": 85_000_000_000,
        "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1990, "mem_clock_mhz": 2619, "mem_clock_max_mhz": 2629,
        "power_limit_w": 700.0, "temperature_c": 41,
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
