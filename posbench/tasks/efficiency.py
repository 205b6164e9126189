"""Efficiency: training and evaluation words/s and peak memory of one method at one length.

The ALiBi paper's efficiency table (Press et al. 2022, Table 1 / Figure 1): the same model with
each position method, trained and evaluated at input length L on one GPU. "Words" are tokens.

One case = one method at one ``seq_len``:
1. Evaluation: ``model.eval()``, no grad; every forward is a batch of non-overlapping windows of
   length L. ``warmup_steps`` forwards, then ``windows`` windows of ``measure_steps`` forwards.
2. Training: full optimizer steps (forward, loss, backward, AdamW step, ``zero_grad(set_to_none)``),
   ``warmup_steps`` first, then ``windows`` windows of ``measure_steps`` steps.
Evaluation runs first so that on a CPU (where a freed allocation may stay resident) its peak is
not inflated by the optimizer state; each phase resets the peak before it starts.

Data parallel (torchrun, or ``nproc`` > 1): every rank runs ``tokens_per_step`` tokens per step
(per device, as the paper counts them), training goes through DistributedDataParallel, and each
window starts after a barrier. Words/s is then the global rate: all ranks' tokens over the
slowest rank's window time (``distributed.global_rates``). Peak memory is per rank: the
``peak_mem_*`` metrics are the maximum over ranks, ``*_mean`` the mean; energy is summed.

Token ids are random (seeded): speed and memory do not depend on the values, and random data
keeps the suite free of a corpus download. Mixed precision (``bfloat16``/``float16``) runs
float32 weights and AdamW under ``torch.autocast``, as fairseq's fp16 training did; float16
adds a gradient scaler.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..config import PRESETS
from . import Diverged, Metric, TaskSettings, known_model_fields

# torch, numpy and the model are imported inside the functions that run a case: validating a
# suite imports this module for its Settings, and `bench.py validate` must not wait for torch.

M = Metric  # the declarations below read as a table
METRICS = {
    "train_wps": M("Training speed", "words/s", "tokens/s, median over windows of full optimizer steps",
                   True, "count", table=True),
    "train_wps_min": M("Training speed, slowest window", "words/s", "tokens/s, slowest training window", None, "count"),
    "train_wps_max": M("Training speed, fastest window", "words/s", "tokens/s, fastest training window", None, "count"),
    "eval_wps": M("Evaluation speed", "words/s", "tokens/s, median over windows of no-grad forwards",
                  True, "count", table=True),
    "eval_wps_min": M("Evaluation speed, slowest window", "words/s", "tokens/s, slowest evaluation window", None, "count"),
    "eval_wps_max": M("Evaluation speed, fastest window", "words/s", "tokens/s, fastest evaluation window", None, "count"),
    "peak_mem_train_bytes": M("Peak training memory", "bytes", "CUDA max_memory_allocated, CPU peak resident set, "
                              "training phase", False, "bytes", table=True),
    "peak_mem_train_reserved_bytes": M("Peak training memory reserved", "bytes",
                                       "CUDA max_memory_reserved in training (null on CPU)", False, "bytes"),
    "peak_mem_eval_bytes": M("Peak evaluation memory", "bytes", "as peak_mem_train_bytes, evaluation phase",
                             False, "bytes", table=True),
    "peak_mem_eval_reserved_bytes": M("Peak evaluation memory reserved", "bytes",
                                      "CUDA max_memory_reserved in evaluation (null on CPU)", False, "bytes"),
    "energy_j": M("Training energy", "J", "joules drawn by the GPU over the measured training windows "
                  "(NVML; null without)", False),
    "j_per_token": M("Training energy per token", "J/token", "joules per trained token "
                     "(energy_j / tokens in the measured windows)", False),
    "eval_energy_j": M("Evaluation energy", "J", "joules over the measured evaluation windows (NVML; null without)",
                       False),
    "eval_j_per_token": M("Evaluation energy per token", "J/token", "joules per evaluated token", False),
    "train_loss": M("Training loss", "nats/token", "mean loss of the last training window "
                    "(random tokens: about ln(vocab))"),
    "mem_base_bytes": M("Base memory", "bytes", "in use before both phases: model and data (CPU: also the "
                        "Python and torch runtime)", None, "bytes"),
    "peak_mem_train_bytes_mean": M("Peak training memory, mean over ranks", "bytes",
                                   "peak_mem_train_bytes averaged over ranks (= it in one process)", None, "bytes"),
    "peak_mem_eval_bytes_mean": M("Peak evaluation memory, mean over ranks", "bytes",
                                  "peak_mem_eval_bytes averaged over ranks", None, "bytes"),
    "world_size": M("Ranks", "", "data-parallel ranks; words/s and energy are totals over them", None, "int"),
    "n_params": M("Parameters", "", "parameters of the model", None, "count"),
    "batch_size": M("Batch size", "sequences", "sequences per step: tokens_per_step // seq_len", None, "int"),
    "tokens_per_step": M("Tokens per step", "tokens", "tokens per step actually used: batch_size * seq_len",
                         None, "int"),
    "threads": M("Threads", "", "torch CPU threads in the worker", None, "int"),
    "n_rounds": M("Rounds", "", "rounds that finished ok; every other metric is the median over them "
                  "(series <metric>_by_round: each round's value)", None, "int"),
}


class Settings(TaskSettings):
    model: Literal[tuple(PRESETS)] = Field(description="model preset (posbench.model.PRESETS)")  # type: ignore[valid-type]
    model_overrides: dict[str, int] = Field(default_factory=dict, description="ModelConfig fields, e.g. vocab_size")
    method_options: dict[str, dict] = Field(
        default_factory=dict, description="per method: constructor options, e.g. {alibi: {bias_dtype: compute}}")
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    tokens_per_step: int = Field(ge=1, description="tokens per optimizer step; batch = tokens_per_step // seq_len")
    warmup_steps: int = Field(2, ge=0, description="steps (and forwards) run before timing, per phase")
    measure_steps: int = Field(5, ge=1, description="steps per measured window")
    windows: int = Field(3, ge=1, description="measured windows per phase; median, min, max are reported")
    lr: float = Field(1e-4, gt=0, description="AdamW learning rate")
    power_interval_s: float = Field(0.1, gt=0, description="NVML power sampling period (s)")
    rounds: int = Field(1, ge=1, description="interleaved rounds: every method of a grid point is measured once per "
                        "round, round-robin, each round in a fresh process; ratios to the baseline are paired "
                        "by round (median and bootstrap 95% interval)")

    _known_fields = field_validator("model_overrides")(known_model_fields)


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    seq_len: int = Field(ge=1, description="input length L of training and evaluation")


def run(case) -> dict:
    import torch

    from .. import distributed
    from ..measure import make_device
    from ..model import TransformerLM, lm_loss, model_config

    s, L = case.settings, case.params.seq_len
    batch = s.tokens_per_step // L
    if batch < 1:
        raise ValueError(f"tokens_per_step {s.tokens_per_step} < seq_len {L}: no full sequence fits in a step")
    device = torch.device(case.device)
    dev = make_device(case.device)
    dtype = getattr(torch, s.dtype)  # float32, bfloat16 or float16 (Settings.dtype)
    torch.manual_seed(s.seed)
    cfg = model_config(s.model, case.method, method_options=s.method_options.get(case.method, {}), **s.model_overrides)
    model = TransformerLM(cfg).to(device)
    vocab = model.cfg.vocab_size
    g = torch.Generator().manual_seed(s.seed + distributed.rank())  # each rank its own data
    # Two batches made up front (B, L+1), alternated: no data work inside the timed windows.
    batches = [torch.randint(0, vocab, (batch, L + 1), generator=g).to(device) for _ in range(2)]
    autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)
    nvml, handle = _nvml(case.device)
    tokens = batch * L
    metrics = {"n_params": model.num_parameters(), "batch_size": batch, "tokens_per_step": tokens,
               "threads": torch.get_num_threads(), "mem_base_bytes": dev.in_use(),
               "world_size": distributed.world_size()}
    series = {}

    # --- evaluation -------------------------------------------------------------------------
    model.eval()
    counter = [0]

    def eval_step():
        x = batches[counter[0] % 2]
        counter[0] += 1
        with torch.no_grad(), autocast:
            model(x[:, :-1])

    eval_s, energy = _phase(dev, eval_step, s, nvml, handle)
    _wps(metrics, series, "eval", tokens * s.measure_steps, eval_s)
    _peak(metrics, "eval", dev.peak())
    _energy(metrics, "eval_", energy, tokens * s.measure_steps * s.windows * distributed.world_size())

    # --- training ---------------------------------------------------------------------------
    model.train()
    ddp = distributed.wrap_ddp(model, case.device)  # ``model`` itself in one process
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    loss_sum = torch.zeros((), device=device)  # summed on device: reading it would synchronize

    def train_step():
        x = batches[counter[0] % 2]
        counter[0] += 1
        with autocast:
            logits = ddp(x[:, :-1])  # (B, L, V)
        loss = lm_loss(logits, x[:, 1:])
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        loss_sum.add_(loss.detach())

    def after_window(name: str, steps: int):
        # One read per window (it synchronizes); a NaN anywhere in the window makes the sum NaN.
        # Averaged over ranks so that every rank reaches the same verdict (outside the timing).
        mean = float(distributed.all_reduce_mean([loss_sum.item()])[0]) / steps
        if mean != mean or mean in (float("inf"), float("-inf")):
            raise Diverged(f"non-finite training loss ({mean}) in {name}")
        metrics["train_loss"] = mean
        loss_sum.zero_()

    train_s, energy = _phase(dev, train_step, s, nvml, handle, after_window=after_window)
    _wps(metrics, series, "train", tokens * s.measure_steps, train_s)
    _peak(metrics, "train", dev.peak())
    _energy(metrics, "", energy, tokens * s.measure_steps * s.windows * distributed.world_size())
    return {"metrics": metrics, "series": series, "info": model.info(device, dtype)}


def _nvml(device: str):
    if device != "cuda":
        return None, None
    from ..env import open_nvml

    nvml, handle = open_nvml()
    return (nvml, handle) if nvml is not None else (None, None)


def _phase(dev, step, s, nvml, handle, after_window=None) -> tuple[list[float], float | None]:
    """Warm up, then time ``s.windows`` windows; (seconds per window, joules over the windows)."""
    from .. import distributed
    from ..measure import PowerSampler

    dev.reset_peak()
    if s.warmup_steps:
        dev.time_window(step, s.warmup_steps)
        if after_window:
            after_window("warm-up", s.warmup_steps)
    seconds = []
    with PowerSampler(nvml, handle, s.power_interval_s) as power:
        for w in range(s.windows):
            distributed.barrier()  # ranks start each window together (a no-op in one process)
            seconds.append(dev.time_window(step, s.measure_steps))
            if after_window:
                after_window(f"window {w}", s.measure_steps)
    energy = power.energy_j
    if distributed.is_distributed():  # all GPUs' energy; unknown if any rank has no NVML
        total = float(distributed.all_reduce_sum([float("nan") if energy is None else energy])[0])
        energy = None if total != total else total
    return seconds, energy


def _wps(metrics, series, phase, tokens_per_window, seconds):
    # One process: tokens / seconds per window. Distributed: all ranks' tokens over the slowest.
    from .. import distributed
    from ..measure import summarize

    rates = distributed.global_rates(tokens_per_window, seconds)
    metrics[f"{phase}_wps"], metrics[f"{phase}_wps_min"], metrics[f"{phase}_wps_max"] = summarize(rates)
    series[f"{phase}_wps_windows"] = rates


def _peak(metrics, phase, peak):
    """Peak memory per rank: the maximum over ranks (what must fit) and the mean."""
    from .. import distributed

    allocated = peak["allocated"]
    if allocated is not None:
        metrics[f"peak_mem_{phase}_bytes"] = int(distributed.all_reduce_max([allocated])[0])
        metrics[f"peak_mem_{phase}_bytes_mean"] = float(distributed.all_reduce_mean([allocated])[0])
    else:
        metrics[f"peak_mem_{phase}_bytes"] = metrics[f"peak_mem_{phase}_bytes_mean"] = None
    reserved = peak["reserved"]
    metrics[f"peak_mem_{phase}_reserved_bytes"] = (
        int(distributed.all_reduce_max([reserved])[0]) if reserved is not None else None)


def _energy(metrics, prefix, joules, tokens):
    metrics[f"{prefix}energy_j"] = joules
    metrics[f"{prefix}j_per_token"] = joules / tokens if joules is not None else None
