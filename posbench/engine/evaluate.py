"""Perplexity of a language model on a token stream, non-overlapping or with a sliding window.

``model(idx (B, T), pos (T,) | None) -> logits (B, T, V)``, logits[:, j] predicting the token after
idx[:, j]. Every window is L_valid tokens and every target is scored exactly once; which tokens
each mode scores, the bound of a synthetic source, the data-parallel split and what is logged:
docs/tasks/extrapolation.md, "Which tokens are scored".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from posbench.engine import distributed

MODES = ("nonoverlapping", "sliding")


@dataclass
class EvalResult:
    """Outcome of :func:`evaluate`. Losses are in nats per token."""

    mode: str
    L_valid: int
    stride: int
    n_tokens_scored: int
    loss: float
    ppl: float
    per_position_loss: np.ndarray  # (L_valid,) float64 mean loss at each window position; NaN if none
    per_position_count: np.ndarray  # (L_valid,) int64 tokens scored at each window position
    interpolated: bool
    interpolate_from: int | None
    n_windows: int

    def to_dict(self) -> dict:
        """JSON-ready copy (arrays as lists, NaN as None)."""
        d = asdict(self)
        d["per_position_loss"] = [None if math.isnan(v) else float(v) for v in self.per_position_loss]
        d["per_position_count"] = [int(c) for c in self.per_position_count]
        return d


def window_plan(n_tokens: int, L_valid: int, stride: int) -> np.ndarray:
    """(W, 2) int64 rows [start, first scored position] of the windows over a stream of n tokens.

    Window w feeds x[start .. start+L_valid-1] and scores its predictions at positions
    first..L_valid-1, i.e. targets x[start+first+1 .. start+L_valid]. See the module docstring.
    """
    m = n_tokens - 1  # number of input positions that have a target
    if m < L_valid:
        raise ValueError(f"evaluate: need at least L_valid+1 = {L_valid + 1} tokens, got {n_tokens}")
    if not 1 <= stride <= L_valid:
        raise ValueError(f"evaluate: stride must be in [1, L_valid={L_valid}], got {stride}")
    starts = np.arange(0, m - L_valid + 1, stride, dtype=np.int64)
    first = np.full(len(starts), L_valid - stride, dtype=np.int64)
    first[0] = 0
    covered = int(starts[-1]) + L_valid  # targets x[1..covered] are scored so far
    if covered < m:
        # Right-aligned last window: it scores only the m - covered targets still missing.
        starts = np.append(starts, m - L_valid)
        first = np.append(first, L_valid - (m - covered))
    return np.stack([starts, first], axis=1)


def positions(L_valid: int, interpolate_from: int | None = None, device=None) -> torch.Tensor | None:
    """Position ids handed to the model: None (plain ``arange``) or interpolated floats.

    Position interpolation (Chen et al. 2023) squeezes L_valid positions into the trained range:
    pos_j = j * L_train / L_valid, all in [0, L_train); with L_valid == L_train it is arange.
    """
    if interpolate_from is None:
        return None
    if interpolate_from < 1:
        raise ValueError(f"evaluate: interpolate_from (L_train) must be >= 1, got {interpolate_from}")
    scale = interpolate_from / L_valid
    return torch.arange(L_valid, dtype=torch.float32, device=device) * scale  # (T,)


def _mode_stride(mode: str, stride: int | None, L_valid: int) -> int:
    """The stride a mode evaluates with: L_valid for ``nonoverlapping``, the given one for ``sliding``."""
    if mode not in MODES:
        raise ValueError(f"evaluate: mode must be one of {MODES}, got {mode!r}")
    if mode == "nonoverlapping":
        if stride not in (None, L_valid):
            raise ValueError(f"evaluate: nonoverlapping mode has stride L_valid={L_valid}, got {stride}")
        return L_valid
    if stride is None:
        raise ValueError("evaluate: sliding mode needs a stride (1 = the paper's analysis)")
    return stride


def evaluate_source(
    token_loss,
    L_valid: int,
    *,
    mode: str = "nonoverlapping",
    stride: int | None = None,
    max_tokens: int | None = None,
) -> EvalResult:
    """The result :func:`evaluate` would give for a model whose loss on token t is ``token_loss[t]``.

    ``token_loss``: (N,) float64, the true source's -log p(x_t | x_<t) for a stream (e.g.
    ``Corpus.oracle_token_loss``); NaN where the source scores nothing. The window plan is the
    one ``evaluate`` uses on N tokens, so every target lands at the window position where the model
    scored it: the per-position curve is the bound beside the model's curve, on the same tokens.
    NaN targets are left out of both the sums and the counts.
    """
    stride = _mode_stride(mode, stride, L_valid)
    loss = np.asarray(token_loss, dtype=np.float64)
    if max_tokens is not None:
        loss = loss[:max_tokens]
    plan = window_plan(len(loss), L_valid, stride)  # (W, 2)
    starts, first = plan[:, 0], plan[:, 1]
    lengths = L_valid - first  # (W,) targets each window scores
    # Window positions first..L_valid-1 of every window, all windows concatenated: (n,).
    offset = np.repeat(np.cumsum(lengths) - lengths, lengths)
    pos = np.arange(int(lengths.sum())) - offset + np.repeat(first, lengths)
    target = np.repeat(starts, lengths) + pos + 1  # position j predicts x[start + j + 1]
    values = loss[target]
    ok = ~np.isnan(values)
    sums = np.bincount(pos[ok], weights=values[ok], minlength=L_valid)
    counts = np.bincount(pos[ok], minlength=L_valid).astype(np.int64)
    n = int(counts.sum())
    total = float(sums.sum() / n) if n else float("nan")
    with np.errstate(invalid="ignore", divide="ignore"):
        per_pos = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return EvalResult(
        mode=mode,
        L_valid=L_valid,
        stride=stride,
        n_tokens_scored=n,
        loss=total,
        ppl=math.exp(total),
        per_position_loss=per_pos,
        per_position_count=counts,
        interpolated=False,
        interpolate_from=None,
        n_windows=len(plan),
    )


def _model_device(model) -> torch.device:
    try:
        return next(model.parameters()).device
    except (AttributeError, StopIteration):
        return torch.device("cpu")


def evaluate(
    model,
    tokens,
    L_valid: int,
    *,
    mode: str = "nonoverlapping",
    stride: int | None = None,
    batch_size: int = 8,
    interpolate_from: int | None = None,
) -> EvalResult:
    """Perplexity of ``model`` on ``tokens`` (1-D ids: numpy array, memmap or tensor; a caller that
    scores only the first n tokens passes ``tokens[:n]``, of which n - 1 are scored).

    mode/stride: see the module docstring; ``nonoverlapping`` implies stride = L_valid, and
        ``sliding`` needs a stride. batch_size: windows per forward pass.
    interpolate_from: an L_train; positions become j * L_train / L_valid (float).
    Inputs go to the model's parameters' device (the CPU for a model without parameters).
    ``log_eval`` logs the result to a tracker (module docstring).
    """
    stride = _mode_stride(mode, stride, L_valid)
    if isinstance(tokens, torch.Tensor):
        tokens = tokens.cpu().numpy()
    device = _model_device(model)
    plan = window_plan(len(tokens), L_valid, stride)  # (W, 2)
    pos = positions(L_valid, interpolate_from, device)
    span = np.arange(L_valid + 1)  # window inputs plus the one token after them
    sums = np.zeros(L_valid, dtype=np.float64)
    counts = np.zeros(L_valid, dtype=np.int64)

    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()
    try:
        with torch.inference_mode():
            for rows in distributed.shard_batches(len(plan), batch_size):
                chunk = plan[rows.start : rows.stop]  # (B, 2)
                seq = np.asarray(tokens[chunk[:, :1] + span], dtype=np.int64)  # (B, L+1)
                seq = torch.from_numpy(seq).to(device)
                logits = model(seq[:, :-1], pos)  # (B, L, V)
                # Only positions >= the batch's smallest first-scored one can count: with S << L
                # this skips the log-softmax over almost all of the (B, L, V) logits.
                lo = int(chunk[:, 1].min())
                V = logits.shape[-1]
                nll = F.cross_entropy(logits[:, lo:].reshape(-1, V).float(), seq[:, lo + 1 :].reshape(-1), reduction="none").view(
                    len(chunk), -1
                )  # (B, L-lo)
                keep = np.arange(lo, L_valid)[None, :] >= chunk[:, 1:2]  # (B, L-lo)
                nll = nll.double().cpu().numpy()
                sums[lo:] += np.where(keep, nll, 0.0).sum(axis=0)
                counts[lo:] += keep.sum(axis=0)
    finally:
        if was_training and hasattr(model, "train"):
            model.train(True)

    if distributed.is_distributed():
        sums = distributed.all_reduce_sum(sums)
        counts = distributed.all_reduce_sum(counts).astype(np.int64)  # float64 holds counts < 2**53 exactly
    n = int(counts.sum())
    loss = float(sums.sum() / n)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_pos = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return EvalResult(
        mode=mode,
        L_valid=L_valid,
        stride=stride,
        n_tokens_scored=n,
        loss=loss,
        ppl=math.exp(loss),
        per_position_loss=per_pos,
        per_position_count=counts,
        interpolated=interpolate_from is not None,
        interpolate_from=interpolate_from,
        n_windows=len(plan),
    )


def log_eval(result: EvalResult, tracker, step: int) -> None:
    """Log ``result``'s perplexity and loss to ``tracker`` at ``step``, and its point of the
    perplexity-against-length curve (module docstring)."""
    key = f"eval/{result.mode}" + ("@interp" if result.interpolated else "")
    at = f"eval/{result.mode}@{result.L_valid}" + ("@interp" if result.interpolated else "")
    tracker.scalars({f"{at}/ppl": result.ppl, f"{at}/loss": result.loss}, step)
    tracker.by_length(key, result.L_valid, result.ppl)
