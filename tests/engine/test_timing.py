"""Measurement: CPU and CUDA timing and memory paths (CUDA through fakes), power, the efficiency task."""

import math
import time
import types

import pytest
import torch

from posbench.core.case import Case
from posbench.core.task import Diverged
from posbench.engine import timing as measure
from posbench.tasks.efficiency import run as efficiency_run
from posbench.tasks.efficiency.task import METRICS, Params, Settings


class FakeCuda:
    """Records the order of the CUDA calls the measuring code makes; elapsed time is scripted."""

    def __init__(self, monkeypatch, elapsed_ms=250.0):
        self.calls = []
        self.events = 0
        fake = self

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing
                self.name = f"event{fake.events}"
                fake.events += 1

            def record(self):
                fake.calls.append(f"record {self.name}")

            def synchronize(self):
                fake.calls.append(f"sync {self.name}")

            def elapsed_time(self, end):
                assert f"sync {end.name}" in fake.calls, "elapsed_time read before the end event completed"
                return elapsed_ms

        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda i=None: self.calls.append("synchronize"))
        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda i=None: self.calls.append("reset"))
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda i=None: 3 * 2**30)
        monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda i=None: 4 * 2**30)
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda i=None: 2**30)


def test_cuda_window_is_bracketed_by_events_after_a_synchronize(monkeypatch):
    fake = FakeCuda(monkeypatch, elapsed_ms=250.0)
    dev = measure.make_device("cuda")
    seconds = dev.time_window(lambda: fake.calls.append("step"), 3)
    assert seconds == pytest.approx(0.25)
    assert fake.calls == ["synchronize", "record event0", "step", "step", "step", "record event1", "sync event1"]


def test_cuda_peak_memory_resets_and_reads_allocated_and_reserved(monkeypatch):
    fake = FakeCuda(monkeypatch)
    dev = measure.make_device("cuda")
    dev.reset_peak()
    assert dev.peak() == {"allocated": 3 * 2**30, "reserved": 4 * 2**30}
    assert dev.in_use() == 2**30
    assert fake.calls == ["synchronize", "reset", "synchronize", "synchronize"]


def test_cpu_window_counts_every_step_and_peak_resets():
    dev = measure.make_device("cpu")
    steps = []
    seconds = dev.time_window(lambda: (steps.append(1), time.sleep(0.01)), 4)
    assert len(steps) == 4 and 0.04 <= seconds < 1.0
    block = bytearray(200 * 2**20)
    block[::4096] = b"x" * len(block[::4096])  # touch every page so it is resident
    high = dev.peak()["allocated"]
    del block
    dev.reset_peak()
    assert dev.peak_resettable  # Linux
    assert dev.peak()["allocated"] < high - 150 * 2**20
    assert dev.peak()["reserved"] is None


def fake_nvml(milliwatts=200_000):
    return types.SimpleNamespace(nvmlDeviceGetPowerUsage=lambda handle: milliwatts)


def test_power_sampler_integrates_energy():
    with measure.PowerSampler(fake_nvml(200_000), "h", interval_s=0.01) as power:
        t0 = time.perf_counter()
        time.sleep(0.2)
        elapsed = time.perf_counter() - t0
    assert len(power.samples) >= 3
    assert power.energy_j == pytest.approx(200.0 * elapsed, rel=0.3)
    with measure.PowerSampler(None, None) as none:
        pass
    assert none.energy_j is None


def test_phase_on_fake_cuda_times_windows_and_measures_energy(monkeypatch):
    FakeCuda(monkeypatch, elapsed_ms=100.0)
    settings = types.SimpleNamespace(warmup_steps=2, measure_steps=3, windows=4, power_interval_s=0.01)
    calls = []
    seconds, energy = efficiency_run._phase(
        measure.make_device("cuda"), efficiency_run.Phase(lambda: calls.append(1)), settings, fake_nvml(), "h"
    )
    assert seconds == [0.1] * 4 and len(calls) == 2 + 3 * 4
    assert energy is not None and energy >= 0


def case(method="sinusoidal", seq_len=16, **settings):
    base = dict(model="tiny", tokens_per_step=64, warmup_steps=1, measure_steps=2, windows=3, threads=1)
    return Case(
        suite="s",
        task="efficiency",
        method=method,
        params=Params(seq_len=seq_len),
        settings=Settings(**{**base, **settings}),
        device="cpu",
        profile="cpu",
        run_id="r",
    )


def test_efficiency_task_on_cpu_reports_every_metric():
    from posbench.run.worker import prepare

    c = case()
    prepare(c)  # as the worker does before every task: threads=1
    out = efficiency_run.run(c)
    m = out["metrics"]
    assert m["batch_size"] == 4 and m["tokens_per_step"] == 64 and m["threads"] == 1
    assert m["n_params"] > 0 and math.isfinite(m["train_loss"])
    assert 0 < m["mem_base_bytes"] <= m["peak_mem_eval_bytes"]
    for phase in ("train", "eval"):
        assert m[f"{phase}_wps_min"] <= m[f"{phase}_wps"] <= m[f"{phase}_wps_max"]
        assert len(out["series"][f"{phase}_wps_windows"]) == 3
        assert m[f"peak_mem_{phase}_bytes"] > 0 and m[f"peak_mem_{phase}_reserved_bytes"] is None
    assert m["energy_j"] is None and m["j_per_token"] is None  # no NVML on a CPU
    assert out["info"]["energy_source"] == "unavailable: needs CUDA"
    assert set(m) <= set(METRICS)


def test_efficiency_rejects_a_step_smaller_than_one_sequence():
    with pytest.raises(ValueError, match="tokens_per_step 8 < seq_len 16"):
        efficiency_run.run(case(tokens_per_step=8))


def test_efficiency_non_finite_loss_is_diverged(monkeypatch):
    import posbench.core.model

    # run() imports lm_loss from posbench.core.model when it starts (no torch at module import).
    monkeypatch.setattr(posbench.core.model, "lm_loss", lambda logits, targets: logits.float().mean() * float("nan"))
    with pytest.raises(Diverged, match="non-finite training loss"):
        efficiency_run.run(case(warmup_steps=0))


def test_efficiency_passes_method_options_to_the_method():
    out = efficiency_run.run(case("alibi", method_options={"alibi": {"bias_dtype": "compute"}}))
    assert out["metrics"]["train_wps"] > 0
    from posbench.core.registry import RegistryError

    with pytest.raises(RegistryError, match=r"method 'alibi': unknown option\(s\) slope"):
        efficiency_run.run(case("alibi", method_options={"alibi": {"slope": 1}}))
