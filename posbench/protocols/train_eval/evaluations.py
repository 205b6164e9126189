"""One perplexity evaluation as a cell of a row's ``series["evals"]``: made by ``eval_cell`` of an
``EvalSpec`` (with the true source's bound on the same tokens, ``source_bound``) and read back from
a stored row by ``evals`` (with the per-position curves, ``curves``), and as the values ``bench.py
compare`` reads (``compare_values``). The extrapolation task writes them; its report, the frontier, precision and
extension read or make the same cells.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_LENGTH = 1 << 40  # an L_valid or stride beyond this is no evaluation anyone ran


@dataclass(frozen=True)
class EvalSpec:
    """One evaluation of a model trained at ``L_train``: perplexity in ``mode`` (nonoverlapping or
    sliding) on windows of ``L_valid`` tokens, positions interpolated from ``L_train`` when
    ``interpolate``."""

    mode: str
    L_valid: int
    L_train: int
    interpolate: bool = False


def eval_cell(model, tokens, spec: EvalSpec, s, device, tracker=None, step: int = 0):
    """``spec`` as a cell dict, and its per-position curve (None on OOM); its perplexity also goes
    to ``tracker`` at ``step`` when given. ``s``: the task's settings (stride, eval_batch_size,
    eval_tokens)."""
    import torch

    from posbench.engine.evaluate import evaluate, log_eval

    mode, Lv, interpolate = spec.mode, spec.L_valid, spec.interpolate
    stride = min(s.stride, Lv) if mode == "sliding" else None
    cell = {
        "mode": mode,
        "L_valid": Lv,
        "stride": stride,
        "interpolate": interpolate,
        "ppl": None,
        "loss": None,
        "tokens": 0,
        "status": "ok",
        "message": "",
    }
    try:
        r = evaluate(
            model,
            tokens[: s.eval_tokens],
            Lv,
            mode=mode,
            stride=stride,
            batch_size=s.eval_batch_size,
            interpolate_from=spec.L_train if interpolate else None,
        )
        if tracker is not None:
            log_eval(r, tracker, step)
    except (MemoryError, torch.cuda.OutOfMemoryError) as exc:
        text = str(exc).splitlines()
        cell.update(status="oom", message=f"{type(exc).__name__}: {text[0] if text else ''}")
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()
        return cell, None
    cell.update(ppl=r.ppl, loss=r.loss, tokens=r.n_tokens_scored)
    return cell, [float(x) for x in r.per_position_loss]


def source_bound(oracle, Lv: int, mode: str, s) -> tuple[float, list[float]] | None:
    """The true source's perplexity and per-position loss on exactly the tokens ``eval_cell`` scores
    at (mode, Lv), or None without a known source. ``oracle``: ``Corpus.oracle_token_loss`` of the
    evaluated tokens."""
    if oracle is None:
        return None
    from posbench.engine.evaluate import evaluate_source

    stride = min(s.stride, Lv) if mode == "sliding" else None
    b = evaluate_source(oracle, Lv, mode=mode, stride=stride, max_tokens=s.eval_tokens)
    return b.ppl, [float(x) for x in b.per_position_loss]


def is_length(value, low: int = 1) -> bool:
    """Whether ``value`` is a whole number (not a bool) in [low, MAX_LENGTH]."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= MAX_LENGTH


def _finite_or_none(value) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value))


def evals(row) -> list[dict]:
    """The well-formed entries of a stored row's ``series["evals"]``: objects whose ``mode`` is a
    string, ``L_valid`` a positive whole number, ``stride`` one or null, ``ppl``/``ppl_std``/``ppl_seed_lo``/``ppl_seed_hi``/
    ``best_ppl_eval`` finite numbers or null, ``status``/``message`` strings. A stored file may
    hold anything; an entry of another shape is left out rather than failing the report."""
    series = row.series if isinstance(getattr(row, "series", None), dict) else {}
    entries = series.get("evals")
    out = []
    for e in entries if isinstance(entries, list) else []:
        if not (
            isinstance(e, dict)
            and isinstance(e.get("mode", ""), str)
            and is_length(e.get("L_valid"))
            and (e.get("stride") is None or is_length(e.get("stride")))
            and all(_finite_or_none(e.get(k)) for k in ("ppl", "ppl_std", "ppl_seed_lo", "ppl_seed_hi", "best_ppl_eval"))
            and isinstance(e.get("status", "ok"), str)
            and isinstance(e.get("message") or "", str)
            and isinstance(e.get("interpolate") or False, bool)
        ):
            continue
        out.append(e)
    return out


def curves(row, key: str = "per_position_loss") -> dict[str, list]:
    """The well-formed curves of a stored row's ``series[key]``: lists of finite numbers by name."""
    series = row.series if isinstance(getattr(row, "series", None), dict) else {}
    stored = series.get(key)
    return {
        k: v
        for k, v in (stored.items() if isinstance(stored, dict) else ())
        if isinstance(v, list) and v and all(_finite_or_none(x) and x is not None for x in v)
    }


def eval_mode_key(entry: dict) -> tuple:
    """(mode, stride, interpolate) of one ``series["evals"]`` entry."""
    return (entry.get("mode", "nonoverlapping"), entry.get("stride"), bool(entry.get("interpolate")))


def compare_values(row) -> dict:
    """A ``ppl@<mode>@<L_valid>[@s<stride>][@interp]`` per evaluation of a stored row, for ``bench.py
    compare``: read from ``series["evals"]`` so that an OOM evaluation (ppl null) is seen even when
    the runner stored no flat ``ppl@...`` copy (a stored flat copy wins: compare reads it first)."""
    values: dict = {}
    for entry in evals(row):
        mode, stride, interpolate = eval_mode_key(entry)
        key = f"ppl@{mode}@{entry.get('L_valid')}"
        key += f"@s{stride}" if stride else ""
        key += "@interp" if interpolate else ""
        ppl = entry.get("ppl") if entry.get("status", "ok") == "ok" else None
        values.setdefault(key, ppl)
    return values
