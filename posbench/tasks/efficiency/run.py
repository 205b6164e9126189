"""One efficiency case (``run``): a model's evaluation forwards, then its training steps, each phase
warmed up and timed in windows, with peak memory and energy; or every method of a grid point in one
process with alternating windows (``run_group``, ``pairing: windows``). Data parallel, pairing and
the memory probe: docs/tasks/efficiency.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from posbench.core.task import Diverged, case_model_config
from posbench.engine import compiled, tracking

# torch, numpy and the model are imported inside the functions that run a case: validating a
# suite imports this module (through the task's declaration), and `bench.py validate` must not wait for torch.

# Metrics a paired-windows row takes from the method's own memory process (``memory_probe``).
MEMORY_METRICS = (
    "peak_mem_train_bytes",
    "peak_mem_train_reserved_bytes",
    "peak_mem_eval_bytes",
    "peak_mem_eval_reserved_bytes",
    "peak_mem_train_bytes_mean",
    "peak_mem_eval_bytes_mean",
    "mem_base_bytes",
    "peak_mem_train_above_base_bytes",
    "peak_mem_eval_above_base_bytes",
)


def _batch_size(s, L: int) -> int:
    batch = s.tokens_per_step // L
    if batch < 1:
        raise ValueError(f"tokens_per_step {s.tokens_per_step} < seq_len {L}: no full sequence fits in a step")
    return batch


def _batches(case, batch: int, device) -> list:
    """Two batches (B, L+1) of seeded random token ids, made up front and alternated: no data
    work inside the timed windows. Every method of a seed gets the same ones."""
    import torch

    from posbench.engine import distributed

    s = case.settings
    vocab = case_model_config(case).vocab_size
    g = torch.Generator().manual_seed(s.seed + distributed.rank())  # each rank its own data
    return [torch.randint(0, vocab, (batch, case.params.seq_len + 1), generator=g).to(device) for _ in range(2)]


class Bench:
    """One method's model at one length with its data: an evaluation step, and after
    ``start_training`` a training step (forward, loss, backward, AdamW step, zero_grad)."""

    def __init__(self, case, batches: list, device, dtype):
        import torch

        from posbench.core.model import build_model
        from posbench.engine import distributed

        s = case.settings
        torch.manual_seed(s.seed)  # every method starts from the same seed
        self.model = build_model(case_model_config(case)).to(device)
        # compile: true: the steps call the compiled module (engine.compiled); compiled at the first call.
        self.method, self.compile, self.compile_s, self.graph_breaks = case.method, s.compile, {}, 0
        self.forward = compiled.compile_module(self.model) if s.compile else self.model
        self.device, self.dtype, self.batches, self.counter = device, dtype, batches, 0
        self.autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)
        self.lr, self.distributed = s.lr, distributed
        self.energy = {"eval": 0.0, "train": 0.0}  # joules over measured windows (NVML; None: unmeasured)
        self.train_loss: float | None = None

    def _next(self):
        x = self.batches[self.counter % 2]
        self.counter += 1
        return x

    def eval_step(self) -> None:
        import torch

        x = self._next()
        with torch.no_grad(), self.autocast:
            self.forward(x[:, :-1])

    def start_training(self, device_kind: str) -> None:
        import torch

        self.model.train()
        self.ddp = self.distributed.wrap_ddp(self.model, device_kind)  # ``model`` itself in one process
        self.train_forward = compiled.compile_module(self.ddp) if self.compile else self.ddp
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=self.lr)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.dtype == torch.float16)
        self.loss_sum = torch.zeros((), device=self.device)  # summed on device: reading it would synchronize

    def train_step(self) -> None:
        from posbench.core.model import lm_loss

        x = self._next()
        with self.autocast:
            logits = self.train_forward(x[:, :-1])  # (B, L, V)
        loss = lm_loss(logits, x[:, 1:])
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
        self.opt.zero_grad(set_to_none=True)
        self.loss_sum.add_(loss.detach())

    def check_loss(self, name: str, steps: int) -> None:
        """The mean loss since the last check; Diverged when it is not finite. One read per
        window (it synchronizes), averaged over ranks so every rank reaches the same verdict."""
        mean = float(self.distributed.all_reduce_mean([self.loss_sum.item()])[0]) / steps
        if mean != mean or mean in (float("inf"), float("-inf")):
            raise Diverged(f"non-finite training loss ({mean}) in {name}")
        self.train_loss = mean
        self.loss_sum.zero_()

    def compile_now(self, phase: str, dev) -> None:
        """compile: true: the phase's first steps, which compile (``compiled.settle``), timed apart
        (``compile_s``) before its warm-up; a compiler failure is ``Unavailable`` with its reason."""
        if not self.compile:
            return
        step = self.eval_step if phase == "eval" else self.train_step
        before = compiled.graph_breaks()
        self.compile_s[phase], calls = compiled.settle(step, f"{self.method} ({phase})", lambda fn: dev.time_window(fn, 1))
        self.graph_breaks += compiled.graph_breaks() - before
        if phase == "train":
            self.check_loss("the compiling steps", calls)

    def info(self) -> dict:
        """The model's info, with how the steps ran (``compile``) and the compile times."""
        out = dict(self.model.info(self.device, self.dtype), compile=compiled.describe(None, self.compile))
        if self.compile:
            out["compile_graph_breaks"] = str(self.graph_breaks)
        return out

    def compile_metrics(self) -> dict:  # eval_compile_s, train_compile_s
        return {f"{phase}_compile_s": seconds for phase, seconds in self.compile_s.items()}


def run(case) -> dict:
    import torch

    from posbench.engine import distributed
    from posbench.engine.timing import energy_source, make_device

    s, L = case.settings, case.params.seq_len
    batch = _batch_size(s, L)
    device = torch.device(case.device)
    dev = make_device(case.device)
    dtype = getattr(torch, s.dtype)  # float32, bfloat16 or float16 (Settings.dtype)
    bench = Bench(case, _batches(case, batch, device), device, dtype)
    model = bench.model
    nvml, handle = _nvml(case.device)
    tracker = tracking.for_case(case)  # words/s and loss per window, logged after its clock stopped
    first = tracker.next_step()  # a later round (its own process) goes on from the earlier rounds' windows
    tokens = batch * L
    metrics = {
        "n_params": model.num_parameters(),
        "batch_size": batch,
        "tokens_per_step": tokens,
        "threads": torch.get_num_threads(),
        "mem_base_bytes": dev.in_use(),
        "world_size": distributed.world_size(),
    }
    series = {}

    # --- evaluation -------------------------------------------------------------------------
    model.eval()
    bench.compile_now("eval", dev)
    with compiled.no_recompile(s.compile):
        evaluation = Phase(
            bench.eval_step,
            steps=s.eval_steps,
            log=lambda w, sec: tracker.window("eval", first + w, tokens * s.eval_steps / sec),
        )
        eval_s, energy = _phase(dev, evaluation, s, nvml, handle)
    _wps(metrics, series, "eval", tokens * s.eval_steps, eval_s)
    _peak(metrics, "eval", dev.peak(), metrics["mem_base_bytes"])
    _energy(metrics, "eval_", energy, tokens * s.eval_steps * s.windows * distributed.world_size())

    # --- training ---------------------------------------------------------------------------
    bench.start_training(case.device)
    bench.compile_now("train", dev)
    with compiled.no_recompile(s.compile):
        training = Phase(
            bench.train_step,
            after_window=bench.check_loss,
            log=lambda w, sec: tracker.window("train", first + w, tokens * s.measure_steps / sec, bench.train_loss),
        )
        train_s, energy = _phase(dev, training, s, nvml, handle)
    tracker.close()
    metrics["train_loss"] = bench.train_loss
    _wps(metrics, series, "train", tokens * s.measure_steps, train_s)
    _peak(metrics, "train", dev.peak(), metrics["mem_base_bytes"])
    _energy(metrics, "", energy, tokens * s.measure_steps * s.windows * distributed.world_size())
    metrics.update(bench.compile_metrics())
    info = dict(bench.info(), energy_source=energy_source(nvml, handle, dev.kind))
    _model_flops(metrics, info, model, L, device, s.dtype)
    return {"metrics": metrics, "series": series, "info": info}


# ---------------------------------------------------------------------------------------------
# pairing: windows


def memory_probe(case) -> dict:
    """``case`` run alone in a fresh worker process with one window of one step per phase (after
    the warm-up, through the runner's ``case.run_alone``): the worker's result, whose peak memory
    is this method's alone."""
    spec = case.spec()
    spec.settings.update(pairing="rounds", rounds=1, windows=1, measure_steps=1, eval_measure_steps=1)
    spec.out_dir = ""  # no run folder: its one window is no curve point (the group logs the case's windows)
    return case.run_alone(spec, case.settings.timeout_s)


def run_group(cases, round_: int) -> dict:
    """Every case (method) of one grid point and round in this process, paired window by window
    (module docstring); ``{case id: worker result}``. A method that fails (its memory process,
    building, warming up, a window) gets its own failure result and the others go on."""
    import time
    import uuid

    import torch

    from posbench.core.outcome import ok_result
    from posbench.engine.timing import EnergyMeter, make_device
    from posbench.engine.timing_windows import Member, alternate

    s, L = cases[0].settings, cases[0].params.seq_len
    members = [Member(c.id) for c in cases]
    memory: dict[str, dict] = {}
    if round_ == 1:  # peak memory: each method alone in a short process, before any timing here
        for m, c in zip(members, cases):
            probe = memory_probe(c)
            if probe["status"] == "ok":
                memory[c.id] = probe["metrics"]
            else:
                m.failure = dict(probe, message=f"memory process: {probe['message']}", metrics={}, series={})
    batch = _batch_size(s, L)
    device = torch.device(cases[0].device)
    dev = make_device(cases[0].device)
    dtype = getattr(torch, s.dtype)
    batches = _batches(cases[0], batch, device)  # one set of data for every method
    for m, c in zip(members, cases):
        m.obj = m.guard(Bench, c, batches, device, dtype)
    nvml, handle = _nvml(cases[0].device)
    meter = EnergyMeter(nvml, handle, s.power_interval_s, dev.synchronize, device=dev.kind)
    first = (round_ - 1) * s.windows  # rounds go on along the balanced order
    trackers = {m.key: tracking.for_case(c) for m, c in zip(members, cases)}  # logged between windows
    t0 = time.perf_counter()

    def clock() -> float:  # window start times: seconds since the group began measuring
        return time.perf_counter() - t0

    def measure(phase: str, steps: int):
        def window(m: Member) -> float:
            b = m.obj
            step = b.eval_step if phase == "eval" else b.train_step
            with meter:
                seconds = dev.time_window(step, steps)
            joules = meter.last_j  # None once any window has no number (no NVML, or the counter restarted)
            b.energy[phase] = None if b.energy[phase] is None or joules is None else b.energy[phase] + joules
            if phase == "train":
                b.check_loss(f"window {len(m.windows[phase])}", steps)
            trackers[m.key].window(
                phase, first + len(m.windows[phase]), tokens * steps / seconds, b.train_loss if phase == "train" else None
            )
            return seconds

        return window

    tokens = batch * L
    for m in members:
        if m.ok:
            m.obj.model.eval()
            m.guard(m.obj.compile_now, "eval", dev)
        if m.ok:
            with compiled.no_recompile(s.compile):
                m.guard(dev.time_window, m.obj.eval_step, s.warmup_steps)
    with compiled.no_recompile(s.compile):
        alternate(members, "eval", s.windows, measure("eval", s.eval_steps), first, clock)

    def start_training(b: Bench) -> None:
        b.start_training(cases[0].device)
        b.compile_now("train", dev)
        if s.warmup_steps:
            with compiled.no_recompile(s.compile):
                dev.time_window(b.train_step, s.warmup_steps)
            b.check_loss("warm-up", s.warmup_steps)

    for m in members:
        m.guard(start_training, m.obj)
    with compiled.no_recompile(s.compile):
        alternate(members, "train", s.windows, measure("train", s.measure_steps), first, clock)
    for t in trackers.values():
        t.close()

    group = uuid.uuid4().hex[:12]
    out = {}
    for m, c in zip(members, cases):
        if not m.ok:
            out[c.id] = m.failure
            continue
        b = m.obj
        metrics = {
            "n_params": b.model.num_parameters(),
            "batch_size": batch,
            "tokens_per_step": tokens,
            "threads": torch.get_num_threads(),
            "world_size": 1,
            "train_loss": b.train_loss,
        }
        series: dict = {}
        for phase, steps in (("eval", s.eval_steps), ("train", s.measure_steps)):
            starts, seconds = zip(*m.windows[phase])
            _wps(metrics, series, phase, tokens * steps, list(seconds))
            series[f"{phase}_wps_window_t"] = [round(t, 6) for t in starts]
            _energy(metrics, "eval_" if phase == "eval" else "", b.energy[phase], tokens * steps * s.windows)
        metrics.update({k: v for k, v in memory.get(c.id, {}).items() if k in MEMORY_METRICS})
        metrics.update(b.compile_metrics())
        peak = _model_flops(metrics, {}, b.model, L, device, s.dtype)
        info = dict(
            b.info(),
            mfu_peak=peak,
            energy_source=meter.source,
            pairing="windows",
            group=group,
            group_methods=str(len(cases)),
            window_order="williams",
            memory=(
                "peak memory from this method's own process (one window of one step per phase)"
                if c.id in memory
                else "peak memory in the round-1 row (the method's own process)"
            ),
        )
        out[c.id] = ok_result({"metrics": metrics, "series": series, "info": info})
    return out


def _model_flops(metrics: dict, info: dict, model, L: int, device, dtype: str) -> str:
    """``train_flops_per_token`` (``posbench.engine.flops``: the model's matmuls and the method's
    own work, forward and backward) and ``train_mfu``, the share of the device's dense peak at
    ``dtype`` (``posbench.engine.peaks``) the training words/s reach, null where the peak is
    unknown (every CPU). ``info["mfu_peak"]`` (also returned) says which peak, or that none is known."""
    import torch

    from posbench.core import registry
    from posbench.engine.flops import train_flops_per_step
    from posbench.engine.peaks import dense_peak

    try:
        method_cls = registry.get(model.cfg.method)
    except (KeyError, ValueError):
        info["mfu_peak"] = f"no FLOP count: method {model.cfg.method!r} is not registered here"
        return info["mfu_peak"]
    per_token = train_flops_per_step(method_cls, model.cfg, L, 1) / L
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    tf32 = dtype == "float32" and device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32
    peak = dense_peak(name, dtype, tf32=tf32)
    wps = metrics.get("train_wps")
    metrics["train_flops_per_token"] = per_token
    # train_wps counts every rank's tokens: the peak is one device's
    metrics["train_mfu"] = wps / metrics.get("world_size", 1) * per_token / peak if peak and wps else None
    kind = "tf32" if tf32 else dtype
    info["mfu_peak"] = (
        f"{name}, {kind} dense peak {peak / 1e12:.1f} TFLOP/s"
        if peak
        else f"unknown peak: {name or device.type} has no {kind} entry in posbench.engine.peaks"
    )
    return info["mfu_peak"]


def _nvml(device: str):
    if device != "cuda":
        return None, None
    from posbench.engine.env import open_nvml

    nvml, handle = open_nvml()
    return (nvml, handle) if nvml is not None else (None, None)


@dataclass(frozen=True)
class Phase:
    """What one timed phase runs: ``step()`` (one step of the model), ``steps`` of it per window
    (None: the settings' ``measure_steps``), ``after_window(name, steps)`` after the warm-up and
    each window, outside the energy meter (training's loss check), and ``log(window, seconds)``
    after each window."""

    step: Callable[[], object]
    steps: int | None = None
    after_window: Callable[[str, int], object] | None = None
    log: Callable[[int, float], object] | None = None


def _phase(dev, phase: Phase, s, nvml, handle) -> tuple[list[float], float | None]:
    """Warm up, then time ``s.windows`` windows of ``phase``; (seconds per window, joules over the
    windows: NVML's energy counter, or sampled power where the GPU lacks it;
    ``posbench.engine.timing.EnergyMeter``)."""
    from posbench.engine import distributed
    from posbench.engine.timing import EnergyMeter

    dev.reset_peak()
    if s.warmup_steps:
        dev.time_window(phase.step, s.warmup_steps)
        if phase.after_window:
            phase.after_window("warm-up", s.warmup_steps)
    steps = phase.steps or s.measure_steps
    seconds = []
    meter = EnergyMeter(nvml, handle, s.power_interval_s, dev.synchronize, device=dev.kind)
    for w in range(s.windows):
        distributed.barrier()  # ranks start each window together (a no-op in one process)
        with meter:  # energy of the window alone: the loss check after it is not counted
            seconds.append(dev.time_window(phase.step, steps))
        if phase.after_window:
            phase.after_window(f"window {w}", steps)
        if phase.log:
            phase.log(w, seconds[-1])
    energy = meter.energy_j
    if distributed.is_distributed():  # all GPUs' energy; unknown if any rank has no NVML
        total = float(distributed.all_reduce_sum([float("nan") if energy is None else energy])[0])
        energy = None if total != total else total
    return seconds, energy


def _wps(metrics, series, phase, tokens_per_window, seconds):
    # One process: tokens / seconds per window. Distributed: all ranks' tokens over the slowest.
    from posbench.engine import distributed
    from posbench.engine.timing import summarize

    rates = distributed.global_rates(tokens_per_window, seconds)
    metrics[f"{phase}_wps"], metrics[f"{phase}_wps_min"], metrics[f"{phase}_wps_max"] = summarize(rates)
    series[f"{phase}_wps_windows"] = rates


def _peak(metrics, phase, peak, base):
    """Peak memory per rank: the maximum over ranks (what must fit) and the mean; and the peak above
    ``base``, the resting footprint measured once the model and data were built, before the first
    step (CUDA: the allocator's bytes; CPU: the resident set, whose ~0.3 GiB of torch and Python
    hid a method's own tens of MiB in the whole-process peak)."""
    from posbench.engine import distributed

    allocated = peak["allocated"]
    if allocated is not None:
        metrics[f"peak_mem_{phase}_bytes"] = int(distributed.all_reduce_max([allocated])[0])
        metrics[f"peak_mem_{phase}_bytes_mean"] = float(distributed.all_reduce_mean([allocated])[0])
    else:
        metrics[f"peak_mem_{phase}_bytes"] = metrics[f"peak_mem_{phase}_bytes_mean"] = None
    above = None if allocated is None or base is None else int(distributed.all_reduce_max([max(allocated - base, 0)])[0])
    metrics[f"peak_mem_{phase}_above_base_bytes"] = above
    reserved = peak["reserved"]
    metrics[f"peak_mem_{phase}_reserved_bytes"] = int(distributed.all_reduce_max([reserved])[0]) if reserved is not None else None


def _energy(metrics, prefix, joules, tokens):
    metrics[f"{prefix}energy_j"] = joules
    metrics[f"{prefix}j_per_token"] = joules / tokens if joules is not None else None
