"""Training a language model: AdamW, warm-up then cosine decay, gradient clipping, mixed precision
on CUDA, checkpoints, divergence detection, curves to a tracker (docs/watching-training.md), and
``trained_model``, the train-or-reuse-the-checkpoint step every training task calls. Seeded, so
deterministic on CPU; under torchrun each rank trains its slice of the global batch (DDP) and
rank 0 writes the checkpoint. ``until(steps_done)`` stops early while the budget still sets the
lr schedule, so a stopped model is the full run's model at that step. The budget is steps, tokens,
measured time or counted operations (``posbench.engine.budget``): steps, tokens and operations
are turned into steps before the first one; a time budget is planned from a warm-up and spent on
the real clock, the schedule following its re-planned step count (docs/tasks/budgets.md).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch

from posbench.core.model import TransformerLM, build_model, lm_loss
from posbench.core.outcome import Diverged
from posbench.engine import distributed
from posbench.engine.budget import DEFAULT_WARMUP_S, TimeBudget, budget_of, measure_step_seconds, steps_for
from posbench.engine.saved_model import reused_model, save_checkpoint


@dataclass
class TrainConfig:
    seq_len: int = 64  # L_train
    batch_size: int = 16
    steps: int | None = None  # budget in optimizer steps ...
    tokens: int | None = None  # ... or in tokens (steps = tokens // (batch_size * seq_len))
    time_s: float | None = None  # ... or in measured training seconds (engine.budget) ...
    flops: float | None = None  # ... or in counted operations (engine.flops)
    warmup_s: float | None = None  # time_s: seconds of the measured warm-up (None: DEFAULT_WARMUP_S)
    lr: float = 1e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup_steps: int = 50
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.98)
    grad_clip: float = 1.0
    precision: str = "auto"  # auto | float32 | bfloat16 | float16 (mixed precision needs CUDA)
    seed: int = 0
    log_every: int = 10

    def total_steps(self, flops_per_step: int | None = None, step_seconds: float | None = None) -> int:
        """The steps the budget allows (``engine.budget.steps_for``); flops and time budgets need
        the operations of a step and the measured step time."""
        kind, value = budget_of(self)
        return steps_for(kind, value, self.batch_size * self.seq_len, flops_per_step, step_seconds)


def lr_at(step: int, cfg: TrainConfig, total: int) -> float:
    """Linear warm-up for ``warmup_steps``, then cosine decay to ``lr * min_lr_ratio``."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine)


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype, or None for plain float32. Mixed precision is a CUDA feature here."""
    allowed = ("auto", "float32", "bfloat16", "float16")
    if precision not in allowed:
        raise ValueError(f"precision must be one of {', '.join(allowed)}, got {precision!r}")
    if device.type != "cuda":
        if precision in ("bfloat16", "float16"):
            raise ValueError(f"precision {precision} needs a CUDA device; use float32 or auto on {device.type}")
        return None
    if precision == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return None if precision == "float32" else getattr(torch, precision)


@dataclass
class TrainResult:
    steps: int
    tokens: int
    seconds: float
    final_loss: float
    curve: list[tuple[int, float]]  # (step, loss) every log_every steps and at the end
    stopped_early: bool = False  # ``until`` ended training before the budget
    flops: float | None = None  # counted training operations of the steps done (engine.flops)
    budget: dict = field(default_factory=dict)  # kind, value, steps it allows (time_s: the warm-up's plan and measure)
    budget_seconds: float | None = None  # time_s: the training time spent from the budget (held-out checks excluded)


def train(
    model: TransformerLM,
    batches: Iterator,  # yields (B, T+1) token ids, or (ids, targets (B, T) with -100 where no loss is taken)
    cfg: TrainConfig,
    device: torch.device | str = "cpu",
    tracker=None,
    until: Callable[[int], bool] | None = None,
    warmup_batches: Iterator | None = None,
) -> TrainResult:
    """Train ``model`` in place (``save_trained`` saves it with its result); log the curves to ``tracker`` (a ``posbench.engine.tracking.Tracker``) if given; stop early
    when ``until(steps done)`` returns True (train to criterion). ``warmup_batches``: a time
    budget's warm-up draws from it (a second iterator of the same data), not from ``batches``."""
    device = torch.device(device)
    kind, value = budget_of(cfg)
    amp = autocast_dtype(cfg.precision, device)
    model.to(device).train()
    ddp = distributed.wrap_ddp(model, device.type)  # ``model`` itself in one process
    flops_per_step = step_flops(model, cfg)
    budget: dict = {"kind": kind, "value": value}
    step_seconds = None
    if kind == "time_s":
        step_seconds, budget["warmup_seconds"], budget["warmup_steps"] = warm_up(model, ddp, cfg, device, amp, warmup_batches)
        budget["step_seconds"] = step_seconds
    total = steps_for(kind, value, cfg.batch_size * cfg.seq_len, flops_per_step, step_seconds)
    budget["steps"] = total  # time_s: the warm-up's plan; the clock decides the steps reached
    torch.manual_seed(cfg.seed)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=cfg.betas,
    )
    # float16 needs loss scaling to keep small gradients representable; bfloat16 does not.
    scaler = torch.amp.GradScaler("cuda") if amp == torch.float16 else None
    curve: list[tuple[int, float]] = []
    start = time.perf_counter()
    last_log = (start, -1)  # (clock, step) of the previous logged step: tokens/s between logs
    tokens_per_step = cfg.batch_size * cfg.seq_len
    loss_value = float("nan")

    def log(step: int, loss: torch.Tensor) -> None:
        nonlocal loss_value, last_log
        # The only synchronisation, every log_every steps. Ranks hold equal slices, so the
        # mean of their means is the global batch's loss (and every rank sees one verdict).
        loss_value = float(distributed.all_reduce_mean([loss.item()])[0])
        if not math.isfinite(loss_value):
            raise Diverged(f"loss became {loss_value} at step {step}")
        curve.append((step, loss_value))
        if tracker is not None:
            now = time.perf_counter()
            tracker.scalars(
                {
                    "train/loss": loss_value,
                    "train/lr": opt.param_groups[0]["lr"],
                    "train/tokens_per_s": (step - last_log[1]) * tokens_per_step / (now - last_log[0]),
                },
                step,
            )
            last_log = (now, step)

    # A time budget is spent on the clock: after each step the steps it will reach are re-planned
    # from this run's mean step time, so a noisy warm-up neither cuts training short nor runs it
    # over, and the schedule decays to its end at the step where the budget runs out.
    clock = None
    if kind == "time_s":
        clock = TimeBudget(value, step_seconds, sync=torch.cuda.synchronize if device.type == "cuda" else lambda: None)
    step, stopped = 0, False
    while step < total:
        inputs, targets = step_inputs(next(batches), device)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg, total)
        ctx = torch.autocast(device.type, dtype=amp) if amp is not None else contextlib.nullcontext()
        with ctx:
            loss = lm_loss(ddp(inputs), targets)
        if step % cfg.log_every == 0 or step == total - 1:
            log(step, loss)
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
        step += 1
        if clock is not None:
            clock.tick()
            total = agreed_steps(clock.total())
        if until is not None and step < total:
            with clock.paused() if clock is not None else contextlib.nullcontext():
                stopped = until(step)
            if stopped:
                break
    done = step
    if curve[-1][0] != done - 1:  # the final loss is the last step's, as at the end of the budget
        log(done - 1, loss)
    seconds = time.perf_counter() - start
    result = TrainResult(
        done,
        done * cfg.batch_size * cfg.seq_len,
        seconds,
        loss_value,
        curve,
        stopped,
        None if flops_per_step is None else float(done * flops_per_step),
        budget,
        None if clock is None else clock.spent,
    )
    model.eval()
    return result


def save_trained(checkpoint: str | Path, model: TransformerLM, cfg: TrainConfig, result: TrainResult) -> None:
    """Save ``{model, train_config, result}`` of a ``train`` to ``checkpoint``: the main process
    writes, every process waits for it."""
    if distributed.is_main():
        save_checkpoint(checkpoint, model, cfg, result)
    distributed.barrier()  # no rank moves on while the checkpoint is half written


def agreed_steps(total: int) -> int:
    """Under torchrun every rank must take the same steps: the fewest any rank's clock allows."""
    if not distributed.is_distributed():
        return total
    return int(-distributed.all_reduce_max([-total])[0])


def step_inputs(batch, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs (B, T), targets (B, T)) of this rank's slice of one batch: (B, T+1) token ids, or
    (ids (B, T+1), targets (B, T)) where -100 marks a token with no loss."""
    if isinstance(batch, tuple):
        ids, targets = (distributed.split_batch(t).to(device, non_blocking=True) for t in batch)
        return ids[:, :-1], targets
    batch = distributed.split_batch(batch).to(device, non_blocking=True)
    return batch[:, :-1], batch[:, 1:]


def step_flops(model: TransformerLM, cfg: TrainConfig) -> int | None:
    """Counted operations of one training step (``engine.flops``); None for a method this
    installation does not know by name."""
    from posbench.core import registry
    from posbench.engine.flops import train_flops_per_step

    try:
        method_cls = registry.get(model.cfg.method)
    except (KeyError, ValueError):
        return None
    return train_flops_per_step(method_cls, model.cfg, cfg.seq_len, cfg.batch_size)


def warm_up(
    model: TransformerLM, ddp, cfg: TrainConfig, device: torch.device, amp, batches: Iterator | None = None
) -> tuple[float, float, int]:
    """(seconds a step, warm-up seconds, timed steps) of training steps through the run's path
    (its batches when given: a separate iterator of the same data, so the batch-making counts;
    else random tokens of its batch shape; DDP, autocast, clipping), with an optimizer whose lr is
    0; the weights are restored after, so the run starts where it would have."""
    saved = {k: v.detach().clone() for k, v in model.state_dict().items()}
    scratch = torch.optim.AdamW(model.parameters(), lr=0.0)
    if batches is None:
        gen = torch.Generator().manual_seed(cfg.seed)
        fixed = torch.randint(0, model.cfg.vocab_size, (cfg.batch_size, cfg.seq_len + 1), generator=gen)
        batches = iter(lambda: fixed, None)

    def step() -> None:
        inputs, targets = step_inputs(next(batches), device)
        ctx = torch.autocast(device.type, dtype=amp) if amp is not None else contextlib.nullcontext()
        with ctx:
            loss = lm_loss(ddp(inputs), targets)
        scratch.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        scratch.step()

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    # Under torchrun a rank goes on while any rank's clock says so: every step is a collective.
    agree = {"agree": lambda more: bool(distributed.all_reduce_max([float(more)])[0])} if distributed.is_distributed() else {}
    measured = measure_step_seconds(step, cfg.warmup_s or DEFAULT_WARMUP_S, sync=sync, **agree)
    model.load_state_dict(saved)
    model.zero_grad(set_to_none=True)
    # Every rank must take the same number of steps: they agree on the mean step time.
    return float(distributed.all_reduce_mean([measured[0]])[0]), measured[1], measured[2]


class Checkpointing(NamedTuple):
    """Where a trained model is saved (None: nowhere), and whether a model an earlier run saved
    there is loaded instead of training."""

    path: Path | None
    reuse: bool = False


NO_CHECKPOINT = Checkpointing(None)


def trained_model(
    cfg,
    tcfg: TrainConfig,
    batches: Callable[[], Iterator],
    device,
    checkpointing: Checkpointing = NO_CHECKPOINT,
    tracker=None,
    until: Callable[[TransformerLM], Callable] | None = None,
) -> tuple[TransformerLM, TrainResult, bool]:
    """(model, result, reused): the ``ModelConfig`` ``cfg`` seeded with ``tcfg.seed`` and trained on
    ``batches()`` (saved to ``checkpointing.path``), or, with ``checkpointing.reuse``, loaded from the
    checkpoint an earlier run left there. ``until(model)`` gives the stop criterion of ``train``, if any."""
    ckpt, reuse = checkpointing
    if ckpt is not None and reuse and (ckpt.exists() or ckpt.is_symlink()):
        found = reused_model(ckpt, cfg, tcfg, device)  # None: not this case's model (it says why)
        if found is not None:
            return found[0], TrainResult(**found[1]["result"]), True
    torch.manual_seed(tcfg.seed)
    model = build_model(cfg)
    data = batches()
    check = until(model) if until is not None else None
    # A time budget's warm-up times the real batch-making on a second iterator of the same data.
    spare = batches() if tcfg.time_s is not None else None
    result = train(model, data, tcfg, device, tracker=tracker, until=check, warmup_batches=spare)
    if ckpt is not None:
        save_trained(ckpt, model, tcfg, result)
    return model, result, False
