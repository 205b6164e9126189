"""The retrieval task's report tables and charts, from result rows alone: accuracies recomputed
from the rows' outcome counts (exact Wilson intervals after merging runs), charts that plot the
table's numbers, learn first, then compare. Details: docs/tasks/retrieval.md.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display on CI runners and GPU boxes
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from posbench.report.charts import line_style, marker_size  # noqa: E402
from posbench.report.learn_first import NOT_LEARNT, comparability, learned, learned_over_seeds, length_text  # noqa: E402
from posbench.report.names import file_stem  # noqa: E402
from posbench.report.rows import Runs  # noqa: E402
from posbench.report.sections import Block, Section  # noqa: E402
from posbench.report.stats import SEED_INTERVAL, effective_length, seed_interval, wilson_interval  # noqa: E402
from posbench.report.table import Cell, Table, ordered, short_commit, slug  # noqa: E402


MAX_COUNT = 1 << 53  # samples in one cell: beyond this a count is no count anyone ran
DEFAULT_LEARNED_THRESHOLD = 0.9  # the task's Settings default: rows written before the rule carry none


def learned_threshold(rows) -> float:
    """The ``learned_threshold`` the rows were run with (the highest, if they differ)."""
    found = [r["series"].get("learned_threshold") for r in rows if isinstance(r.get("series"), dict)]
    found = [t for t in found if _fraction(t)]
    return max(found) if found else DEFAULT_LEARNED_THRESHOLD


def _whole(value, low: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= MAX_COUNT


def cells(row) -> list[dict]:
    """The well-formed entries of a stored row's ``series["cells"]``: ``L_valid`` a positive whole
    number, ``depth`` a number in [0, 1] or null (probes without a needle), ``0 <= correct <= total``
    whole numbers, ``status`` a string. A stored file may hold anything; an entry of another shape
    is left out."""
    series = row.get("series") if isinstance(row.get("series"), dict) else {}
    stored = series.get("cells")
    return [c for c in (stored if isinstance(stored, list) else [])
            if isinstance(c, dict) and _whole(c.get("L_valid"), 1) and _whole(c.get("total"))
            and _whole(c.get("correct")) and c["correct"] <= c["total"] and isinstance(c.get("status", "ok"), str)
            and (c.get("depth") is None or _fraction(c["depth"]))]


def _fraction(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1


def _ok_rows(rows, probe=None):
    for r in rows:
        if r.get("status", "ok") != "ok" or r.get("task", "retrieval") != "retrieval":
            continue
        params = r.get("params") if isinstance(r.get("params"), dict) else {}
        if not isinstance(params.get("probe"), str) or not _whole(params.get("L_train"), 1):
            continue  # the report's reader skipped such a row already (posbench.report.stored.check_params)
        if probe is not None and r["params"]["probe"] != probe:
            continue
        yield r


def accuracy_table(rows: list[dict], threshold: float = 0.5) -> list[dict]:
    """One entry per (method, probe, L_train, L_valid): counts summed over depths (and over rows,
    so merged seeds or runs pool their samples), accuracy, Wilson 95% interval, whether that
    (method, probe, L_train) learnt the task (``learned``: its pooled accuracy at L_train against
    the rows' ``learned_threshold``) and its effective length at ``threshold``. Cells of several
    training seeds (their ``seed``) also give, per entry, ``n_seeds``, the per-seed accuracies'
    95% t interval (``seed_lo``, ``seed_hi``) and ``seeds_learnt``; ``learned`` is then
    ``learned_over_seeds`` (every seed learnt)."""
    counts: dict[tuple, list] = {}
    per_seed: dict[tuple, dict] = {}  # (method, probe, L, Lv) -> {seed: [correct, total, ok]}
    for r in _ok_rows(rows):
        key = (r["method"], r["params"]["probe"], r["params"]["L_train"])
        for c in cells(r):
            entry = counts.setdefault(key + (c["L_valid"],), [0, 0, True])
            entry[0] += c["correct"]
            entry[1] += c["total"]
            entry[2] &= c.get("status", "ok") == "ok"
            if isinstance(c.get("seed"), int):
                one = per_seed.setdefault(key + (c["L_valid"],), {}).setdefault(c["seed"], [0, 0, True])
                one[0] += c["correct"]
                one[1] += c["total"]
                one[2] &= c.get("status", "ok") == "ok"
    table = []
    for (method, probe, L, Lv), (k, n, ok) in sorted(counts.items()):
        acc = k / n if ok and n else None
        lo, hi = wilson_interval(k, n) if ok and n else (None, None)
        seeds = {seed: (a / b if ok_ and b else None) for seed, (a, b, ok_) in per_seed.get((method, probe, L, Lv), {}).items()}
        _, _, n_seeds, seed_lo, seed_hi = seed_interval(list(seeds.values())) if len(seeds) > 1 else (0, 0, 0, None, None)
        table.append({"method": method, "probe": probe, "L_train": L, "L_valid": Lv, "correct": k,
                      "total": n, "acc": acc, "lo": lo, "hi": hi, "by_seed": seeds if len(seeds) > 1 else {},
                      "n_seeds": n_seeds, "seed_lo": seed_lo, "seed_hi": seed_hi})
    eff: dict[tuple, dict] = {}
    for t in table:
        eff.setdefault((t["method"], t["probe"], t["L_train"]), {})[t["L_valid"]] = t["acc"]
    bar = learned_threshold(list(_ok_rows(rows)))
    at_train = {(t["method"], t["probe"], t["L_train"]): t["by_seed"] for t in table if t["L_valid"] == t["L_train"]}
    for t in table:
        acc = eff[(t["method"], t["probe"], t["L_train"])]
        t["effective_length"] = effective_length(acc, threshold)
        t["learned"] = learned(acc.get(t["L_train"]), bar)
        seeds = at_train.get((t["method"], t["probe"], t["L_train"])) or {}
        if seeds:  # learn first, per seed
            verdicts = [learned(a, bar) for a in seeds.values()]
            t["learned"] = learned_over_seeds(verdicts)
            t["seeds_learnt"] = (sum(v is True for v in verdicts), len(verdicts))
        t["learned_threshold"] = bar
    return table


def _seeds_learnt(table: list[dict], several: bool) -> dict:
    """{row label: (seeds learnt, seeds)} of the entries trained with several seeds."""
    return {(f"{t['method']}, L_train={t['L_train']}" if several else t["method"]): t["seeds_learnt"]
            for t in table if t.get("seeds_learnt")}


def cell_text(t: dict) -> str:
    """``30% [11, 60]`` (Wilson 95% over samples), then `` seeds [25, 35]`` (95% t interval of the
    mean over seeds) when several seeds ran."""
    text = f"{100 * t['acc']:.0f}% [{100 * t['lo']:.0f}, {100 * t['hi']:.0f}]"
    if t.get("seed_lo") is not None:  # an accuracy's interval, clipped to [0, 1]
        text += f" seeds [{100 * max(0.0, t['seed_lo']):.0f}, {100 * min(1.0, t['seed_hi']):.0f}]"
    return text


def _verdicts(table: list[dict], several: bool) -> dict:
    """{row label: learned} of one probe's table entries (label: method, with L_train if several)."""
    return {(f"{t['method']}, L_train={t['L_train']}" if several else t["method"]): t["learned"] for t in table}


def markdown_table(rows: list[dict], probe: str, threshold: float = 0.5) -> str:
    """Methods x L_valid accuracy (Wilson 95% interval) for one probe, plus effective length (or
    "not learnt at L_train"), then how many methods were comparable."""
    table = [t for t in accuracy_table(rows, threshold) if t["probe"] == probe]
    lengths = sorted({t["L_valid"] for t in table})
    methods = list(dict.fromkeys(t["method"] for t in table))
    lines = ["| method | L_train | " + " | ".join(f"L={Lv}" for Lv in lengths) + " | effective length |",
             "|---|---|" + "---|" * len(lengths) + "---|"]
    for m in methods:
        for L in sorted({t["L_train"] for t in table if t["method"] == m}):
            cells = {t["L_valid"]: t for t in table if t["method"] == m and t["L_train"] == L}
            text = []
            for Lv in lengths:
                t = cells.get(Lv)
                text.append("-" if t is None or t["acc"] is None else cell_text(t))
            first = next(iter(cells.values()))
            eff = length_text(first["learned"], first["effective_length"])
            lines.append(f"| {m} | {L} | " + " | ".join(text) + f" | {eff} |")
    if table:  # how many methods were comparable, under the table
        lines += ["", comparability(_verdicts(table, True), learned_threshold(list(_ok_rows(rows))),
                                    _seeds_learnt(table, True)).note()]
    return "\n".join(lines)


def probe_table(rows: list[dict], probe: str, threshold: float = 0.5) -> Table:
    """``markdown_table`` as a report ``Table``: methods (with L_train when there are several) x
    L_valid, each cell ``30% [11, 60]`` (Wilson 95%) linked to its case, then the effective length."""
    table = [t for t in accuracy_table(rows, threshold) if t["probe"] == probe]
    lengths = sorted({t["L_valid"] for t in table})
    ok = [r for r in _ok_rows(rows, probe)]
    several = len({t["L_train"] for t in table}) > 1
    hardware = next((r.get("hardware") for r in ok if r.get("hardware")), "")
    out = Table(key=slug(f"retrieval-{probe}-accuracy-{hardware}"),
                title=f"{probe}: accuracy (Wilson 95% interval)", caption="", task="retrieval",
                metric=f"acc {probe}", unit="fraction", column_header="L_valid",
                columns=lengths + ["effective length", "steps"],
                rows=[], hardware=hardware, commit=short_commit(r.get("git_commit") for r in ok),
                higher_is_better=True)
    case_of = {(r["method"], r["params"]["L_train"]): r for r in ok}
    for m in dict.fromkeys(t["method"] for t in table):
        for L in sorted({t["L_train"] for t in table if t["method"] == m}):
            label = f"{m}, L_train={L}" if several else m
            out.rows.append(label)
            row = case_of.get((m, L), {})
            link = {"case_id": row.get("case_id"), "run_id": row.get("run_id")}
            cells = {t["L_valid"]: t for t in table if t["method"] == m and t["L_train"] == L}
            for Lv in lengths:
                t = cells.get(Lv)
                if t is None or t["acc"] is None:
                    out.cells[(label, Lv)] = Cell(text="-", status="missing", **link)
                    continue
                out.cells[(label, Lv)] = Cell(text=cell_text(t), value=t["acc"], spread=(t["lo"], t["hi"]), **link)
            first = next(iter(cells.values()))
            eff = first["effective_length"] if first["learned"] else None
            out.cells[(label, "effective length")] = Cell(text=length_text(first["learned"], first["effective_length"]),
                                                          value=None if eff is None else float(eff), **link)
            out.cells[(label, "steps")] = Cell(text=steps_text(row.get("metrics", {})), **link)
    verdicts = comparability(_verdicts(table, several), learned_threshold(ok), _seeds_learnt(table, several))
    out.title += verdicts.title_suffix()
    out.extra["learnt"], out.extra["not_learnt"] = verdicts.learnt, verdicts.not_learnt
    out.pooled = True  # counts of every run of a case pooled: no run supersedes another
    out.caption = (f"Fraction of {probe} answers exactly right, counts pooled over depths, seeds and runs, with "
                   f"its Wilson 95% interval; effective length: the longest L_valid with accuracy >= {threshold:g} "
                   f"there and at every shorter L_valid, given only for a model that learnt the task at L_train "
                   f"(accuracy >= {verdicts.threshold:.0%}; otherwise '{NOT_LEARNT}'); steps: optimizer steps "
                   f"trained, 'stopped' where training stopped on reaching stop_at_acc (train to criterion). "
                   + (f"With several training seeds, the accuracy is the mean over seeds (each scores the same "
                      f"samples) and 'seeds [lo, hi]' its {SEED_INTERVAL}; a method counts as learnt only when "
                      "every seed learnt. " if any(t["n_seeds"] for t in table) else "")
                   + f"{verdicts.note()} "
                   f"{out.hardware} (commit {out.commit}).")
    return out


def steps_text(metrics) -> str:
    """``1700 (stopped)`` when training stopped at its criterion, ``3000`` when it ran the whole
    budget, ``-`` when the row's metrics do not say."""
    if not isinstance(metrics, dict):
        return "-"
    steps = metrics.get("train_steps")
    if not _whole(steps, 1):
        return "-"
    return f"{steps} (stopped)" if metrics.get("stopped_at_step") is not None else f"{steps}"


def heatmap_table(rows: list[dict], method: str, L_train: int | None = None):
    """(depths, lengths, acc) of passkey for one method: acc (n_depths, n_lengths) float array,
    NaN where no sample ran. Counts of several rows (seeds, runs) are pooled."""
    counts: dict[tuple, list] = {}
    for r in _ok_rows(rows, "passkey"):
        if r["method"] != method or (L_train is not None and r["params"]["L_train"] != L_train):
            continue
        for c in cells(r):
            if c.get("status", "ok") == "ok" and c["total"] and c.get("depth") is not None:
                entry = counts.setdefault((c["depth"], c["L_valid"]), [0, 0])
                entry[0] += c["correct"]
                entry[1] += c["total"]
    depths = sorted({d for d, _ in counts})
    lengths = sorted({Lv for _, Lv in counts})
    acc = np.full((len(depths), len(lengths)), np.nan)
    for (d, Lv), (k, n) in counts.items():
        acc[depths.index(d), lengths.index(Lv)] = k / n
    return depths, lengths, acc


def heatmap_chart(rows: list[dict], method: str, L_train: int | None = None):
    """Needle-in-a-haystack heatmap of one method: passkey accuracy, depth (rows, 0 = needle at
    the start) x L_valid (columns). Returns the Figure; the image's array is the table's."""
    depths, lengths, acc = heatmap_table(rows, method, L_train)
    if not lengths:
        raise ValueError(f"heatmap: no passkey results for method {method!r}")
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(lengths), 1.2 + 0.5 * len(depths)))
    im = ax.imshow(acc, vmin=0.0, vmax=1.0, cmap="RdYlGn", aspect="auto")
    ax.set_xticks(range(len(lengths)), [str(Lv) for Lv in lengths])
    ax.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths])
    for i in range(len(depths)):
        for j in range(len(lengths)):
            if not np.isnan(acc[i, j]):
                ax.text(j, i, f"{100 * acc[i, j]:.0f}", ha="center", va="center", fontsize=8)
    ax.set_xlabel("L_valid (tokens)")
    ax.set_ylabel("needle depth")
    title = f"passkey: {method}" + (f" (L_train {L_train})" if L_train else "")
    verdicts = {t["learned"] for t in accuracy_table(rows) if t["method"] == method and t["probe"] == "passkey"
                and (L_train is None or t["L_train"] == L_train)}
    if False in verdicts:
        title += f", {NOT_LEARNT}"
    ax.set_title(title, fontsize=10)
    fig.colorbar(im, ax=ax, label="accuracy")
    fig.tight_layout()
    return fig


def accuracy_chart(rows: list[dict], probe: str, L_train: int | None = None):
    """Accuracy vs L_valid per method for one probe: log-2 x axis, Wilson 95% error bars, and a
    dashed vertical line at L_train (gid ``L_train``). A method that did not learn the task at
    L_train is drawn grey and dotted, "(not learnt at L_train)" in its legend entry."""
    table = [t for t in accuracy_table(rows) if t["probe"] == probe and t["acc"] is not None
             and (L_train is None or t["L_train"] == L_train)]
    if not table:
        raise ValueError(f"accuracy chart: no results for probe {probe!r}")
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for index, method in enumerate(dict.fromkeys(t["method"] for t in table)):
        pts = sorted((t["L_valid"], t["acc"], t["lo"], t["hi"]) for t in table if t["method"] == method)
        x, y, lo, hi = (np.array(v, dtype=float) for v in zip(*pts))
        style = line_style(index)  # methods that coincide (all at 100%) stay apart by marker and dash
        label = method
        if any(t["learned"] is False for t in table if t["method"] == method):
            style = {**style, "color": "0.6", "linestyle": ":"}
            label = f"{method} ({NOT_LEARNT})"
        ax.plot(x, y, markersize=marker_size(index), markerfacecolor="none", markeredgewidth=1.3, label=label,
                gid=f"method:{method}", **style)
        ax.errorbar(x, y, yerr=[y - lo, hi - y], fmt="none", ecolor=style["color"], alpha=0.5, capsize=3)
    for L in sorted({t["L_train"] for t in table}):
        ax.axvline(L, linestyle="--", color="0.4", gid="L_train")
    ax.set_xscale("log", base=2)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("L_valid (tokens, log scale)")
    ax.set_ylabel("accuracy")
    ax.set_title(f"{probe}: accuracy vs evaluation length (dashed: L_train)", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def accuracy_sections(runs: Runs, baseline: str | None = None) -> list[Section]:
    """The task's report: per probe, accuracy per L_valid with Wilson intervals (``probe_blocks``);
    the summary metrics (accuracy at L_train and at the longest L_valid, effective length,
    learned) are columns of those tables, not one-cell tables of their own. The run details go
    to the appendix (``posbench.report.sections.collect_sections``)."""
    return [Section("Retrieval accuracy (Wilson 95% intervals)", "retrieval", probe_blocks(runs))]


def summary_tables(runs: Runs) -> list[Table]:
    """The tables printed at the end of a run: per probe, accuracy per L_valid with its Wilson
    interval and the effective length (or "not learnt at L_train")."""
    return [b.table for b in probe_blocks(runs)]


def probe_blocks(runs: Runs) -> list[Block]:
    """Per probe: methods x L_valid accuracy with Wilson intervals (counts pooled over rows, so
    merged runs pool their samples), its accuracy chart, and after passkey the heatmaps."""
    records = runs.rows[runs.rows["task"] == "retrieval"].to_dict("records")
    ok = [r for r in records if r.get("status") == "ok"]
    blocks = []
    for probe in ordered(r["params"]["probe"] for r in ok):
        table = probe_table(ok, probe)

        def accuracy(probe=probe):
            if not any(t["probe"] == probe and t["acc"] is not None for t in accuracy_table(ok)):
                return []  # every cell failed: the table says so, there is nothing to draw
            return [(f"retrieval_{file_stem(probe)}_accuracy", f"{probe}: accuracy vs L_valid", accuracy_chart(ok, probe))]

        sources = [accuracy]
        if probe == "passkey":
            def heatmaps():
                return [(f"retrieval_passkey_heatmap_{file_stem(m)}", f"passkey heatmap: {m}", heatmap_chart(ok, m))
                        for m in ordered(r["method"] for r in ok if r["params"]["probe"] == "passkey")
                        if heatmap_table(ok, m)[1]]

            sources.append(heatmaps)
        blocks.append(Block(table, sources, heading=probe))
    return blocks


def write_charts(rows: list[dict], folder) -> list[Path]:
    """Every retrieval chart of ``rows`` as PNG in ``folder``: one accuracy chart per probe and
    one passkey heatmap per method. Returns the paths written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    ok = list(_ok_rows(rows))
    written = []
    for probe in dict.fromkeys(r["params"]["probe"] for r in ok):
        written.append(_save(accuracy_chart(ok, probe), folder / f"retrieval_{file_stem(probe)}_accuracy.png"))
    for method in dict.fromkeys(r["method"] for r in ok if r["params"]["probe"] == "passkey"):
        written.append(_save(heatmap_chart(ok, method), folder / f"retrieval_passkey_heatmap_{file_stem(method)}.png"))
    return written


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
