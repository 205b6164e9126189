"""Energy: NVML's cumulative counter per measured window, the power-sampling fallback for GPUs
without it, and ``info.energy_source`` in the efficiency task's rows; all through a fake pynvml
whose counter advances with a fake clock (``tests/helpers/fake_nvml.py``)."""

import pytest

from posbench.core.case import Case
from posbench.engine import timing
from posbench.engine.env import NVML_UNAVAILABLE
from posbench.tasks.efficiency import run as efficiency_run
from posbench.tasks.efficiency.task import Params, Settings
from tests.helpers.fake_nvml import FakeCudaClock, FakeNvml


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
