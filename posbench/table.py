"""The comparison table: methods as rows, sequence lengths as columns, one block per metric.

The layout of the ALiBi paper's efficiency table. A cell is the value and its ratio to the
baseline method at the same grid point of the same run, e.g. ``25.8k (0.99x)``; a case that did
not end ``ok`` shows its status (``unavailable``, ``oom``, ...). Rows come from ``cases.jsonl``
(the last row per case), so every number traces back to a stored row and its env.json.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import pandas as pd

TITLES = {
    "train_wps": "Train words/s",
    "eval_wps": "Eval words/s",
    "peak_mem_train_bytes": "Train memory",
    "peak_mem_eval_bytes": "Eval memory",
    "j_per_token": "Train J/token",
}


def fmt(metric: str, value) -> str:
    """Human units: 25.8k words/s, 19.2 GB (decimal, as the paper), 3 significant digits else."""
    if value is None or (isinstance(value, float) and value != value):
        return "n/a"
    if metric.endswith("_bytes"):
        return f"{value / 1e9:.1f} GB" if value >= 1e9 else f"{value / 1e6:.0f} MB"
    if "wps" in metric:
        if value >= 1e6:
            return f"{value / 1e6:.2f}M"
        return f"{value / 1e3:.1f}k" if value >= 1e3 else f"{value:.0f}"
    return f"{value:.3g}"


def long_frame(rows: list[dict], metrics: list[str]) -> pd.DataFrame:
    """One line per case: method, grid axes, status, then each metric (NaN unless status ok)."""
    records = []
    for r in rows:
        ok = r["status"] == "ok"
        records.append({"method": r["method"], **r["params"], "status": r["status"],
                        **{m: (r["metrics"].get(m) if ok else None) for m in metrics}})
    return pd.DataFrame.from_records(records)


def _axes(rows: list[dict], column_axis: str) -> tuple[str, list[str]]:
    """(the column axis, the other grid axes); a grid without ``column_axis`` uses its first axis."""
    params = list(dict.fromkeys(k for r in rows for k in r["params"]))
    axis = column_axis if column_axis in params else params[0]
    return axis, [p for p in params if p != axis]


def values(rows: list[dict], metric: str, column_axis: str = "seq_len") -> pd.DataFrame:
    """Numeric pivot: index method (+ other axes), columns the column axis."""
    frame = long_frame(rows, [metric])
    axis, other = _axes(rows, column_axis)
    return frame.pivot(index=["method"] + other, columns=axis, values=metric).astype(float)


def ratios(rows: list[dict], metric: str, baseline: str, column_axis: str = "seq_len") -> pd.DataFrame:
    """``values`` divided by the baseline method's value at the same grid point (NaN without one)."""
    frame = long_frame(rows, [metric])
    axis, other = _axes(rows, column_axis)
    keys = other + [axis]
    base = frame.loc[frame["method"] == baseline, keys + [metric]].rename(columns={metric: "_base"})
    merged = frame.merge(base, on=keys, how="left")
    merged["_ratio"] = merged[metric].astype(float) / merged["_base"].astype(float)
    return merged.pivot(index=["method"] + other, columns=axis, values="_ratio").astype(float)


def build(rows: list[dict], metrics: list[str], baseline: Optional[str], methods: list[str] | None = None,
          column_axis: str = "seq_len") -> pd.DataFrame:
    """The formatted table: MultiIndex columns (metric title, ``L=<value>``), cells as strings."""
    if not rows:
        return pd.DataFrame()
    frame = long_frame(rows, metrics)
    axis, other = _axes(rows, column_axis)
    status = frame.pivot(index=["method"] + other, columns=axis, values="status")
    blocks = {}
    for metric in metrics:
        vals = values(rows, metric, axis)
        rat = ratios(rows, metric, baseline, axis) if baseline else vals * float("nan")
        block = status.copy().astype(object)
        for idx in status.index:
            for col in status.columns:
                st = status.loc[idx, col]
                if st != "ok":
                    block.loc[idx, col] = "" if pd.isna(st) else st
                    continue
                if pd.isna(vals.loc[idx, col]):  # the case ran but this metric does not apply to it
                    block.loc[idx, col] = "n/a"
                    continue
                r = rat.loc[idx, col]
                suffix = f" ({r:.2f}x)" if pd.notna(r) else ""
                block.loc[idx, col] = fmt(metric, vals.loc[idx, col]) + suffix
        block.columns = [f"L={c}" if axis == "seq_len" else f"{axis}={c}" for c in block.columns]
        blocks[TITLES.get(metric, metric)] = block
    table = pd.concat(blocks, axis=1)
    # Row order: the suite's method order, else the order the rows came in (pivot sorts by name).
    present = list(dict.fromkeys(r["method"] for r in rows))
    order = [m for m in (methods or present) if m in present]
    return table.reindex(order, level="method") if table.index.nlevels > 1 else table.reindex(order)


def _header(table: pd.DataFrame) -> list[str]:
    names = [" / ".join(str(n) for n in table.index.names)]
    return names + [f"{metric} {col}" for metric, col in table.columns]


def _index_label(idx) -> str:
    return " / ".join(str(i) for i in idx) if isinstance(idx, tuple) else str(idx)


def to_markdown(table: pd.DataFrame) -> str:
    header = _header(table)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for idx, row in table.iterrows():
        lines.append("| " + " | ".join([_index_label(idx)] + [str(v) for v in row]) + " |")
    return "\n".join(lines) + "\n"


def to_text(table: pd.DataFrame) -> str:
    """Aligned plain text for the terminal: one block per metric, so it fits a screen."""
    out = []
    for metric in dict.fromkeys(m for m, _ in table.columns):
        block = table[metric]
        block.index = [_index_label(i) for i in block.index]
        out.append(f"{metric}\n{block.to_string()}")
    return "\n\n".join(out) + "\n"


def write(table: pd.DataFrame, folder: Path, note: str = "") -> None:
    """``table.md`` (with ``note`` above the table) and ``table.csv`` (same cells, flat header)."""
    (folder / "table.md").write_text((note + "\n\n" if note else "") + to_markdown(table))
    flat = table.copy()
    flat.columns = _header(table)[1:]
    flat.index = [_index_label(i) for i in flat.index]
    flat.index.name = _header(table)[0]
    flat.to_csv(folder / "table.csv")
