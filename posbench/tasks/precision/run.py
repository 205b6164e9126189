"""One precision case: the ``bias_counts`` study (distinct bias values per dtype, ``analysis.py``,
with its staircase charts written beside the run) or the ``bias_dtype_ppl`` study (one model
trained as the extrapolation task trains it, evaluated with its bias in float32 and in the compute
dtype). docs/tasks/precision.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from posbench.core.files import atomic_write_text, own_folder, write_figure
from posbench.engine import tracking
from posbench.protocols.train_eval.evaluations import EvalSpec, eval_cell, source_bound
from posbench.protocols.train_eval.model import checkpoint_path, train_case_model
from posbench.protocols.training import open_corpus
from posbench.tasks.precision.report import CHART_DTYPES, staircase_figure

if TYPE_CHECKING:
    import numpy as np

# torch, numpy, the model and the analysis are imported inside the functions that run a case:
# validating a suite imports this module (through the task's declaration), and must not wait for torch.


def run(case) -> dict:
    s = case.settings
    if case.params.study == "bias_counts":
        return _bias_counts(case, s)
    return _bias_dtype_ppl(case, s)


def _bias_counts(case, s) -> dict:
    out_dir = Path(case.out_dir or ".") / "precision"
    result = run_precision_case(
        {
            "n_heads": s.analysis_heads,
            "length": s.analysis_length,
            "window": s.analysis_window,
            "heads": s.analysis_chart_heads,
            "factor": s.analysis_factor,
            "dtypes": s.analysis_dtypes,
            "out_dir": str(out_dir),
        }
    )
    metrics = {}
    for dtype in s.analysis_dtypes:
        counts = sorted(r["distinct"] for r in result["last_window"] if r["dtype"] == dtype)
        if counts:
            metrics[f"last_window_distinct@{dtype}"] = counts[len(counts) // 2]
    atomic_write_text(out_dir / "tables.md", result["markdown"] + "\n")  # a link there is replaced, not written through
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
        chart = staircase_chart(s["n_heads"], s["length"], head, out_dir / f"alibi_staircase_head{head}", dtypes=chart_dtypes)
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

    from posbench.core.model import build_model

    L = case.params.L_train
    corpus = open_corpus(s.corpus)
    # One training per method and length, shared by every case that evaluates it.
    ckpt = checkpoint_path(case, f"{case.method}__L_train={L}")
    with tracking.for_case(case, ckpt.stem if ckpt is not None else None) as tracker:  # training curves
        model, metrics, series = train_case_model(case, corpus, ckpt, {"bias_dtype": "float32"}, s.seed, tracker)
    valid = corpus.split("valid")
    oracle = corpus.oracle_token_loss(valid[: s.eval_tokens])  # (N,) or None
    metrics["best_ppl_eval"] = None if oracle is None else math.exp(float(np.nanmean(oracle)))
    dtype = getattr(torch, s.eval_dtype)
    evals = []
    for bias_dtype in ("float32", "compute"):
        variant = build_model(dataclasses.replace(model.cfg, method_options={"bias_dtype": bias_dtype}))
        variant.load_state_dict(model.state_dict())
        variant = variant.to(device=case.device, dtype=dtype).eval()
        for factor in s.L_valid_factors:
            cell, _ = eval_cell(variant, valid, EvalSpec("nonoverlapping", factor * L, L), s, case.device)
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


@dataclass
class StaircaseChart:
    """A drawn staircase: the Figure (still open, so its Axes can be inspected), the files written,
    and the arrays plotted, keyed by dtype name."""

    figure: Any  # matplotlib.figure.Figure
    png: Path
    svg: Path
    positions: np.ndarray  # (last,)
    values: dict[str, np.ndarray]  # dtype -> (last,) bias after the cast, as float64

    @property
    def paths(self) -> list[Path]:
        return [self.png, self.svg]


def staircase_chart(
    n_heads: int, length: int, head: int, path: str | Path, last: int = 192, dtypes: Iterable = CHART_DTYPES
) -> StaircaseChart:
    """Step plot of one head's bias over its last ``last`` positions, one line per dtype
    (``report.staircase_figure``), written while a ``bias_counts`` case runs. ``path`` names the
    files; its suffix is replaced by .png and .svg."""
    fig, positions, values = staircase_figure(n_heads, length, head, last, dtypes)
    base = Path(path)
    own_folder(base.parent)
    png, svg = base.with_suffix(".png"), base.with_suffix(".svg")
    write_figure(fig, png, dpi=120)
    write_figure(fig, svg)
    return StaircaseChart(figure=fig, png=png, svg=svg, positions=positions, values=values)
