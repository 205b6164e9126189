"""Measurement: CPU and CUDA timing and memory paths (CUDA through fakes), power, the efficiency task."""

import math
import time
import types

import pytest
import torch

from posbench.core.case import Case
from posbench.core.task import Diverged
from posbench.engine import timing
from posbench.engine import timing as measure
from posbench.engine.env import NVML_UNAVAILABLE
from posbench.tasks.efficiency import run as efficiency_run
from posbench.tasks.efficiency.task import METRICS, Params, Settings
from tests.helpers.fake_nvml import FakeCudaClock, FakeNvml


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


# Energy: NVML's cumulative counter per measured window, the power-sampling fallback for GPUs
# without it, and ``info.energy_source`` in the efficiency task's rows; all through a fake pynvml
# whose counter advances with a fake clock (``tests/helpers/fake_nvml.py``).


def test_the_counter_gives_each_window_its_delta_read_after_a_synchronize():
    nvml = FakeNvml(watts=250.0)
    dev = FakeCudaClock(nvml, window_s=0.5)
    meter = timing.EnergyMeter(nvml, "gpu0", synchronize=dev.synchronize)
    assert meter.source == timing.ENERGY_COUNTER == "nvml-energy-counter" and meter.available
    for _ in range(3):
        with meter:
            dev.time_window(lambda: None, 2)
        nvml.advance(7.0)  # between windows (a loss check, the next method): not counted
    assert meter.windows == [125.0, 125.0, 125.0] and meter.last_j == 125.0
    assert meter.energy_j == 375.0
    # the probe, then every read of the counter right after a synchronize; no power sampling
    assert nvml.calls == ["energy"] + ["synchronize", "energy"] * 6


@pytest.mark.parametrize("counter", ["not-supported", "function-not-found", "absent"])
def test_a_gpu_without_the_counter_falls_back_to_power_sampling(counter):
    nvml = FakeNvml(watts=200.0, counter=counter)
    assert timing.energy_source(nvml, "gpu0") == timing.POWER_SAMPLING == "nvml-power-sampling"
    dev = FakeCudaClock(nvml, window_s=0.5, real_s=0.15)  # the sampler's thread sees real time
    meter = timing.EnergyMeter(nvml, "gpu0", interval_s=0.02, synchronize=dev.synchronize)
    probes = nvml.calls.count("energy")
    for _ in range(2):
        with meter:
            dev.time_window(lambda: None, 1)
    assert nvml.calls.count("energy") == probes  # the counter is not asked again
    assert nvml.calls.count("power") >= 2 * 3
    assert meter.energy_j == pytest.approx(200.0 * 0.15 * 2, rel=0.35)  # about watts x real seconds
    assert all(j > 0 for j in meter.windows) and len(meter.windows) == 2


def test_another_nvml_error_leaves_energy_unavailable_with_its_reason():
    nvml = FakeNvml(counter="no-permission")
    meter = timing.EnergyMeter(nvml, "gpu0")
    assert meter.source == "unavailable: NVML energy counter: Insufficient Permissions"
    with meter:
        nvml.advance(1.0)
    assert meter.windows == [None] and meter.energy_j is None and "power" not in nvml.calls


def test_without_cuda_or_nvml_energy_is_null_and_says_why():
    assert timing.energy_source(None, None, "cpu") == timing.ENERGY_NEEDS_CUDA == "unavailable: needs CUDA"
    assert timing.energy_source(FakeNvml(), "gpu0", "cpu") == "unavailable: needs CUDA"  # NVML alone is not enough
    assert timing.energy_source(None, None, "cuda") == NVML_UNAVAILABLE
    meter = timing.EnergyMeter(None, None, device="cpu")
    with meter:
        pass
    assert meter.windows == [None] and meter.energy_j is None and not meter.available
    assert timing.EnergyMeter(FakeNvml(), "gpu0").energy_j is None  # no window measured yet


def test_a_counter_restart_or_a_failed_window_gives_no_number():
    nvml = FakeNvml()
    meter = timing.EnergyMeter(nvml, "gpu0")
    with meter:
        nvml.start_mj = 0  # the driver reloaded inside the window: the counter went back
    assert meter.windows == [None] and meter.energy_j is None
    meter = timing.EnergyMeter(nvml, "gpu0")
    with pytest.raises(RuntimeError), meter:
        raise RuntimeError("the step failed")
    assert meter.windows == []


# -- the efficiency task's rows --------------------------------------------------------------------


def _case(method="sinusoidal", **settings):
    base = dict(
        model="tiny",
        tokens_per_step=32,
        warmup_steps=1,
        measure_steps=1,
        eval_measure_steps=1,
        windows=2,
        threads=1,
        model_overrides={"n_layers": 1, "d_model": 32, "n_heads": 2, "d_ff": 64},
    )
    return Case(
        suite="s",
        task="efficiency",
        method=method,
        params=Params(seq_len=16),
        settings=Settings(**{**base, **settings}),
        device="cpu",
        profile="cpu",
        run_id="r",
    )


def test_a_phase_sums_the_counter_over_its_windows_and_not_the_loss_checks():
    nvml = FakeNvml(watts=300.0)
    dev = FakeCudaClock(nvml, window_s=0.25)
    settings = _case(windows=4).settings
    seconds, joules = efficiency_run._phase(
        dev, efficiency_run.Phase(lambda: None, after_window=lambda name, steps: nvml.advance(10.0)), settings, nvml, "gpu0"
    )
    assert seconds == [0.25] * 4
    assert joules == pytest.approx(4 * 300.0 * 0.25)  # warm-up and the checks after each window excluded


@pytest.mark.parametrize("counter, source", [("ok", "nvml-energy-counter"), ("not-supported", "nvml-power-sampling")])
def test_efficiency_rows_say_where_their_energy_came_from(monkeypatch, counter, source):
    nvml = FakeNvml(watts=400.0, counter=counter)
    dev = FakeCudaClock(nvml, window_s=0.5, real_s=0.02)
    monkeypatch.setattr(efficiency_run, "_nvml", lambda device: (nvml, "gpu0"))
    monkeypatch.setattr(timing, "make_device", lambda kind: dev)
    out = efficiency_run.run(_case())
    m = out["metrics"]
    assert out["info"]["energy_source"] == source
    if counter == "ok":  # exact: 2 windows x 0.5 s x 400 W per phase
        assert m["energy_j"] == pytest.approx(400.0) and m["eval_energy_j"] == pytest.approx(400.0)
        assert m["j_per_token"] == pytest.approx(400.0 / (32 * 1 * 2))
    else:  # sampled over the windows' real time: positive, and far below what the fake clock would give
        assert 0 < m["energy_j"] < 400.0 and 0 < m["eval_energy_j"] < 400.0


def test_paired_windows_rows_read_the_counter_per_method_window(monkeypatch):
    nvml = FakeNvml(watts=100.0)
    dev = FakeCudaClock(nvml, window_s=0.2)
    monkeypatch.setattr(efficiency_run, "_nvml", lambda device: (nvml, "gpu0"))
    monkeypatch.setattr(timing, "make_device", lambda kind: dev)
    cases = [_case(pairing="windows", windows=3, method=m) for m in ("sinusoidal", "alibi")]
    out = efficiency_run.run_group(cases, 2)  # round 2: no memory processes
    for row in out.values():
        assert row["status"] == "ok", row["message"]
        assert row["info"]["energy_source"] == "nvml-energy-counter"
        # each method's own 3 windows of 0.2 s at 100 W, not the other method's in between
        assert row["metrics"]["energy_j"] == pytest.approx(60.0) and row["metrics"]["eval_energy_j"] == pytest.approx(60.0)
