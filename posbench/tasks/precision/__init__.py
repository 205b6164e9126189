"""Precision: what half precision does to ALiBi (SambaNova's "ALiBi Deep Dive", 2023): distinct
bias values per dtype (``bias_counts``) and the perplexity cost of a compute-dtype bias
(``bias_dtype_ppl``). Details: docs/tasks/precision.md.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from posbench.core.registry import register_task
from posbench.core.task import Metric, Task
from posbench.engine import tracking
from posbench.tasks.extrapolation import METRICS as EXTRAPOLATION_METRICS
from posbench.tasks.extrapolation import Settings as TrainEvalSettings
from posbench.tasks.extrapolation import checkpoint_path, eval_cell, source_bound, trained_model
from posbench.tasks.extrapolation import compare_values
from posbench.tasks.training import open_corpus


def staircase_charts(rows: list[dict]) -> list:
    """The staircase charts of the distinct-value table (imported here only when a report draws them)."""
    from posbench.tasks.precision.staircase import report_charts

    return report_charts(rows)


_DISTINCT = "last_window_distinct@*"
# The report's precision section: the distinct-value table of the bias_counts study with its
# staircase charts, then perplexity by bias dtype and its cost; training and model sizes go to
# the run-details appendix. The per-dtype and longest-length values the suite's progress lines
# print are columns of those tables (shown_in), not tables of one value each.
METRICS = {
    _DISTINCT: Metric(title="Distinct bias values in the last window", unit="",
                 doc="last_window_distinct@<dtype>: median over heads of distinct bias values in the last window of "
                 "positions after the cast", higher_is_better=True, fmt="int", table=True, axis="dtype",
                 charts=(staircase_charts,)),
    "last_window_distinct@float16": Metric(title="Distinct float16 bias values, last window", unit="values",
                                      doc="median over heads of distinct float16 bias values in the last window",
                                      higher_is_better=True, fmt="int", shown_in=_DISTINCT),
    "last_window_distinct@bfloat16": Metric(title="Distinct bfloat16 bias values, last window", unit="values",
                                       doc="the same for bfloat16", higher_is_better=True, fmt="int", shown_in=_DISTINCT),
    "last_window_distinct@float32": Metric(title="Distinct float32 bias values, last window", unit="values",
                                      doc="the same for float32 (every position distinct)", higher_is_better=True, fmt="int",
                                      shown_in=_DISTINCT),
    "ppl@*": Metric(title="Perplexity by bias dtype", unit="perplexity", doc="ppl@<float32|compute>_bias@<L_valid>: perplexity "
               "in eval_dtype with the bias kept in float32 or cast to the compute dtype", higher_is_better=False, fmt="ppl",
               table=True, axis="L_valid"),
    "ppl_diff@*": Metric(title="Perplexity cost of the compute-dtype bias", unit="perplexity",
                    doc="ppl_diff@<L_valid>: compute-dtype bias minus float32 bias", higher_is_better=None, fmt="ppl", table=True,
                    axis="L_valid", appendix=False),
    "ppl_diff_at_max_len": Metric(title="Perplexity cost of the compute-dtype bias", unit="perplexity",
                             doc="perplexity with the bias in the compute dtype minus with a float32 bias, "
                             "longest L_valid", higher_is_better=None, fmt="ppl", shown_in="ppl_diff@*"),
    "best_ppl_eval": Metric(title="Source perplexity on the evaluated tokens", unit="perplexity",
                       doc="perplexity of the true source on the evaluated tokens (synthetic sources), else null",
                       higher_is_better=None, fmt="ppl"),
    # the training of the bias_dtype_ppl study, declared as the extrapolation task declares it
    **{k: EXTRAPOLATION_METRICS[k] for k in ("best_ppl", "final_train_loss", "train_steps", "train_tokens",
                                             "train_seconds", "reused_checkpoint", "n_params")},
}


class Settings(TrainEvalSettings):
    eval_dtype: Literal["float32", "bfloat16", "float16"] = "bfloat16"
    analysis_heads: int = Field(32, ge=1, description="bias_counts: number of heads (BLOOM-7B: 32)")
    analysis_length: int = Field(8192, ge=1, description="bias_counts: positions")
    analysis_window: int = Field(1000, ge=1, description="bias_counts: positions per window")
    analysis_chart_heads: list[int] = Field([0, 15, 31], min_length=1)
    analysis_factor: float = Field(0.25, gt=0, description="interpolation factor applied to the bias")
    analysis_dtypes: list[str] = Field(["float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"])


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    study: Literal["bias_counts", "bias_dtype_ppl"]
    L_train: int = Field(64, ge=2)


def run(case) -> dict:
    s = case.settings
    if case.params.study == "bias_counts":
        return _bias_counts(case, s)
    return _bias_dtype_ppl(case, s)


def _bias_counts(case, s) -> dict:
    out_dir = Path(case.out_dir or ".") / "precision"
    result = run_precision_case({
        "n_heads": s.analysis_heads, "length": s.analysis_length, "window": s.analysis_window,
        "heads": s.analysis_chart_heads, "factor": s.analysis_factor, "dtypes": s.analysis_dtypes,
        "out_dir": str(out_dir),
    })
    metrics = {}
    for dtype in s.analysis_dtypes:
        counts = sorted(r["distinct"] for r in result["last_window"] if r["dtype"] == dtype)
        if counts:
            metrics[f"last_window_distinct@{dtype}"] = counts[len(counts) // 2]
    (out_dir / "tables.md").write_text(result["markdown"] + "\n")
    return {"metrics": metrics, "series": {k: v for k, v in result.items() if k != "markdown"}}


def _records(table) -> list[dict]:
    # Plain Python scalars so json.dumps takes the result without a custom encoder.
    rows = table.to_dict("records")
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in rows]


def run_precision_case(settings: dict) -> dict:
    """The bias_counts study: analyze + tables + one staircase chart per chosen head, as a JSON-ready dict.

    The charts draw the requested dtypes among CHART_DTYPES (all requested ones if none is).

    ``settings`` keys (all optional but out_dir): n_heads, length, window, heads, factor,
    dtypes (names), out_dir (where the charts go).
    """
    from posbench.tasks.precision.analysis import analyze, format_tables
    from posbench.tasks.precision.staircase import CHART_DTYPES, staircase_chart

    known = {"n_heads", "length", "window", "heads", "factor", "dtypes", "out_dir"}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ValueError(f"precision: unknown settings {unknown}; allowed: {', '.join(sorted(known))}")
    if "out_dir" not in settings:
        raise ValueError("precision: settings need out_dir (folder for the charts)")
    args = {k: settings[k] for k in ("n_heads", "length", "window", "factor") if k in settings}
    for key in ("heads", "dtypes"):
        if key in settings:
            args[key] = tuple(settings[key])
    report = analyze(**args)
    s = report.settings
    out_dir = Path(settings["out_dir"])
    chart_dtypes = [d for d in s["dtypes"] if d in CHART_DTYPES] or s["dtypes"]  # see CHART_DTYPES
    charts = []
    for head in s["heads"]:
        chart = staircase_chart(s["n_heads"], s["length"], head, out_dir / f"alibi_staircase_head{head}",
                                dtypes=chart_dtypes)
        charts.append({"head": head, "dtypes": chart_dtypes, "png": str(chart.png), "svg": str(chart.svg)})
    return {
        "settings": s,
        "notes": report.notes,
        "counts": _records(report.counts),
        "last_window": _records(report.last_window),
        "scaled_counts": _records(report.scaled_counts),
        "scaled_last_window": _records(report.scaled_last_window),
        "charts": charts,
        "markdown": format_tables(report),
    }


def _bias_dtype_ppl(case, s) -> dict:
    import numpy as np
    import torch

    from posbench.core.model import TransformerLM

    L = case.params.L_train
    corpus = open_corpus(s.corpus)
    # One training per method and length, shared by every case that evaluates it.
    ckpt = checkpoint_path(case, f"{case.method}__L_train={L}")
    with tracking.for_case(case, ckpt.stem if ckpt is not None else None) as tracker:  # training curves
        model, metrics, series = trained_model(case, s, corpus, L, ckpt, {"bias_dtype": "float32"}, s.seed, tracker)
    valid = corpus.split("valid")
    oracle = corpus.oracle_token_loss(valid[: s.eval_tokens])  # (N,) or None
    metrics["best_ppl_eval"] = None if oracle is None else math.exp(float(np.nanmean(oracle)))
    dtype = getattr(torch, s.eval_dtype)
    evals = []
    for bias_dtype in ("float32", "compute"):
        variant = TransformerLM(dataclasses.replace(model.cfg, method_options={"bias_dtype": bias_dtype}))
        variant.load_state_dict(model.state_dict())
        variant = variant.to(device=case.device, dtype=dtype).eval()
        for factor in s.L_valid_factors:
            cell, _ = eval_cell(variant, valid, L, factor * L, "nonoverlapping", s, case.device)
            cell["bias_dtype"] = bias_dtype
            bound = source_bound(oracle, factor * L, "nonoverlapping", s)
            if bound is not None:
                cell["best_ppl_eval"] = bound[0]
            evals.append(cell)
            metrics[f"ppl@{bias_dtype}_bias@{factor * L}"] = cell["ppl"]
    for factor in s.L_valid_factors:
        a, b = metrics.get(f"ppl@float32_bias@{factor * L}"), metrics.get(f"ppl@compute_bias@{factor * L}")
        metrics[f"ppl_diff@{factor * L}"] = None if a is None or b is None else b - a
    metrics["ppl_diff_at_max_len"] = metrics[f"ppl_diff@{max(s.L_valid_factors) * L}"]
    series["evals"] = evals
    return {"metrics": metrics, "series": series, "info": model.info(case.device, dtype)}


# compare reads the bias_dtype_ppl evaluations as the extrapolation task's cells
TASK = register_task(Task(Settings, Params, METRICS, run, compare_values=compare_values, name="precision"))
