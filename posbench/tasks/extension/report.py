"""The extension task's report, from result rows alone: per (suite, machine, L_train) and quality
measure, recipes x fine-tuning steps k (k = 0: zero-shot), each drawn as one line per recipe; then
SambaNova's test, ALiBi interpolate against extrapolate with its verdict (``interpolation_verdict``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from posbench.report import numbers as fmt
from posbench.report.names import slug
from posbench.report.rows import Runs
from posbench.report.table import SPREAD_STD, Cell, Table, TableSpec
from posbench.tasks.extension.interpolation_verdict import verdict_tables

# The report's row grouping and sections import pandas and matplotlib, so they are imported inside
# the functions: validating or listing suites imports this module, and must not wait for them.
if TYPE_CHECKING:
    from posbench.report.sections import Section

TITLE = "Context extension"
REPORT_ORDER = 25  # after extrapolation, before kernels

# A quality measure's table, recipes x k, by the measure's format (``measures``); each measure's
# table names its own metric head (``ppl@<mode>@<L_valid>``, ``passkey@<L_valid>``).
MEASURE_TABLES = {
    "ppl": TableSpec(
        task="extension",
        metric="ppl",
        unit="perplexity",
        fmt="ppl",
        column_header="k (fine-tuning steps)",
        row_header="method, recipe",
        higher_is_better=False,
    ),
    "plain": TableSpec(
        task="extension",
        metric="passkey",
        unit="fraction",
        fmt="plain",
        column_header="k (fine-tuning steps)",
        row_header="method, recipe",
        higher_is_better=True,
    ),
}


def report_sections(runs: Runs, baseline: str | None = None) -> list[Section]:
    """Per quality measure, a table of recipes x fine-tuning steps and its chart: quality against
    k, one line per recipe; then the interpolate-against-extrapolate verdicts of ALiBi."""
    from posbench.report.sections import Block, Section, table_charts

    tables = extension_tables(runs)
    blocks = [Block(t, table_charts(runs, t)) for t in tables] + [Block(t) for t in verdict_tables(runs)]
    return [Section("Context extension", "extension", blocks)]


def summary_tables(runs: Runs) -> list[Table]:
    return extension_tables(runs) + verdict_tables(runs)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def row_label(method: str, params: dict) -> str:
    """``rotary pi``; ALiBi with its bias dtype: ``alibi interpolate, bias compute``."""
    label = f"{method} {params.get('recipe')}"
    return label + (f", bias {params['bias_dtype']}" if method == "alibi" else "")


def measures(rows) -> list[tuple[str, str, str]]:
    """(metric head, title, format) of each quality measure the rows hold: perplexity per mode at
    L_target and at the longest L_valid, passkey accuracy at both."""
    series = next((r.series for r in rows if isinstance(r.series, dict) and r.series.get("L_valid")), {})
    lengths, modes = series.get("L_valid") or [], series.get("modes") or []
    if not lengths:
        return []
    picks = dict.fromkeys([lengths[0], lengths[-1]])
    out = []
    for mode in modes:
        out += [(f"ppl@{mode}@{Lv}", f"Perplexity at L_valid {Lv}, {mode}", "ppl") for Lv in picks]
    out += [(f"passkey@{Lv}", f"Passkey accuracy at L_valid {Lv}", "plain") for Lv in picks]
    return out


def extension_tables(runs: Runs) -> list[Table]:
    """One table per (suite, hardware, L_train) and quality measure: a row per method and recipe
    (and ALiBi bias dtype), a column per k; unavailable recipes are left out and named in the note."""
    from posbench.report.grouping import by_params, task_groups

    out = []
    for suite, hardware, group in task_groups(runs.rows, "extension"):
        points: dict[int, list] = {}
        rows = [r for members in by_params(group).values() for r in members]
        own = checkpoint_lengths(rows)
        for r in rows:
            key = (_checkpoint(r), r.params.get("L_train"))
            points.setdefault(own.get(key, key[1]), []).append(r)
        for L, members in points.items():
            ok = [r for r in members if r.status == "ok" and isinstance(r.metrics, dict)]
            note = unavailable_note([r for r in members if r.status == "unavailable"])
            others = [r for r in members if r.status not in ("ok", "unavailable")]
            ks = sorted({int(k) for r in ok for k in (r.series or {}).get("finetune_steps", [])})
            target = next((int(r.metrics["L_target"]) for r in ok if _number(r.metrics.get("L_target"))), None)
            place = TablePlace(suite, hardware, L, target)
            for measure in measures(ok):
                out.append(_table(place, measure, ok + others, ks, note))
    return out


def _checkpoint(r):
    return r.settings.get("pretrained") if isinstance(r.settings, dict) else None


def checkpoint_lengths(rows) -> dict:
    """(checkpoint, grid L_train) -> the checkpoint's own L_train (metric ``L_train``), so that its
    unavailable rows join the table of its ok ones."""
    return {
        (_checkpoint(r), r.params.get("L_train")): int(r.metrics["L_train"])
        for r in rows
        if isinstance(r.metrics, dict) and _number(r.metrics.get("L_train"))
    }


@dataclass(frozen=True)
class TablePlace:
    """Where one extension table stands: its suite, hardware, L_train and L_target."""

    suite: str
    hardware: str
    L: int
    target: int | None


def _table(place: TablePlace, measure: tuple[str, str, str], rows, ks, note) -> Table:
    """The table of one quality ``measure`` (head, title, kind; ``measures``) at ``place``: a row per
    method and recipe, a column per k."""
    from posbench.report.grouping import short_commit

    suite, hardware, L, target = place.suite, place.hardware, place.L, place.target
    head, title, kind = measure
    seeds = max((r.metrics.get("n_seeds") or 1 for r in rows if isinstance(r.metrics, dict)), default=1)
    t = Table(
        replace(MEASURE_TABLES[kind], metric=head),
        key=slug(f"{suite}-extension-{head}-L{L}-{hardware}"),
        title="",
        caption="",
        columns=ks,
        rows=[],
        hardware=hardware,
        commit=short_commit(r.git_commit for r in rows),
        rest={"L_train": L},
        spread=SPREAD_STD if seeds > 1 else "",
    )
    for r in rows:
        label = row_label(r.method, r.params)
        t.rows.append(label)
        link = {"case_id": r.case_id, "run_id": r.run_id}
        for k in ks:
            if r.status != "ok":
                t.cells[(label, k)] = Cell(text=r.status, status=r.status, message=str(r.message or "")[:200], **link)
                continue
            value, std = r.metrics.get(f"{head}@k{k}"), r.metrics.get(f"{head}@k{k}_std")
            if not _number(value):
                t.cells[(label, k)] = Cell(text="-", status="missing", **link)
                continue
            text = fmt.ppl(value) if kind == "ppl" else f"{100 * value:.0f}%"
            spread = (value - std, value + std) if _number(std) else None
            if spread is not None:
                text += f" ± {fmt.ppl(std) if kind == 'ppl' else f'{100 * std:.0f}'}"
            t.cells[(label, k)] = Cell(text=text, value=value, spread=spread, **link)
    t.title = f"{title} after k fine-tuning steps at L_target {target}, L_train {L}"
    t.caption = (
        f"Each recipe applied to the model trained at L_train = {L}, then fine-tuned k steps at L_target = "
        f"{target} (k = 0: zero-shot; each k its own fine-tune from the trained model, fresh optimizer, "
        f"its own warm-up). {'Lower' if kind == 'ppl' else 'Higher'} is better"
        + (f"; mean ± std over {seeds} seeds" if seeds > 1 else "; one seed")
        + f". {hardware} "
        f"(commit {t.commit})."
    )
    t.caption += base_note(rows, kind)
    t.note = note
    return t


def unavailable_note(rows) -> str:
    """One line naming the unavailable cases by method and bias dtype: ``alibi none, pi; rotary
    none, pi with bias compute``."""
    by: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        by.setdefault((r.method, r.params.get("bias_dtype", "float32")), []).append(str(r.params.get("recipe")))
    parts = [
        f"{method} {', '.join(recipes)}" + ("" if dtype == "float32" else f" with bias {dtype}")
        for (method, dtype), recipes in by.items()
    ]
    return f"Unavailable (the recipe does not apply; each row says why): {'; '.join(parts)}." if parts else ""


def base_note(rows, kind: str) -> str:
    """The base models' own quality at L_train (learn first: a passkey the base never learnt
    compares nothing at L_target)."""
    key = "base_ppl_at_train_len" if kind == "ppl" else "base_passkey_at_train_len"
    seen = {}
    for r in rows:
        value = r.metrics.get(key) if isinstance(r.metrics, dict) else None
        if _number(value):
            seen.setdefault(r.method, fmt.ppl(value) if kind == "ppl" else f"{100 * value:.0f}%")
    if not seen:
        return ""
    what = "perplexity" if kind == "ppl" else "passkey accuracy"
    return f" The trained models' own {what} at L_train: " + ", ".join(f"{m} {v}" for m, v in seen.items()) + "."
