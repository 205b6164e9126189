"""SambaNova's test, from result rows alone: does interpolating ALiBi's positions (the recipe
``interpolate``, positions scaled by L_train / L_target) beat extrapolating them (``extrapolate``)?
Per (suite, hardware, L_train, bias dtype) where both recipes of alibi have a row, one table:
each perplexity measure (mode, L_valid, k) with both recipes' means over seeds, their difference
paired by seed with its 95% t interval, and a verdict: a recipe is better only when the interval
excludes 0 (beyond the seed spread), else "not separable"; one seed gives no verdict.
The extension suite's ``sambanova`` profile runs it on the dependency suite's long-copy corpus.
"""

from __future__ import annotations

import math
import re

from posbench.report import numbers as fmt
from posbench.report.names import slug
from posbench.report.rows import Runs
from posbench.report.stats import seed_interval
from posbench.report.table import Cell, Table, TableSpec

RECIPES = ("extrapolate", "interpolate")
PERPLEXITY = re.compile(r"^ppl@(\w+)@(\d+)@k(\d+)$")  # ppl@<mode>@<L_valid>@k<k>
COLUMNS = ["extrapolate", "interpolate", "interpolate - extrapolate", "verdict"]
NOT_SEPARABLE = "not separable"
ONE_SEED = "one seed: no verdict"
VERDICT_TABLE = TableSpec(
    task="extension",
    metric="interpolate vs extrapolate",
    unit="perplexity",
    fmt="ppl",
    column_header="",
    row_header="measure",
    higher_is_better=None,
)


def verdict(lo: float | None, hi: float | None) -> str:
    """The verdict of a perplexity difference interpolate - extrapolate with 95% interval [lo, hi]
    over seeds (lower perplexity is better): a recipe wins only when the interval excludes 0."""
    if lo is None or hi is None:
        return ONE_SEED
    if hi < 0:
        return "interpolate better"
    if lo > 0:
        return "extrapolate better"
    return NOT_SEPARABLE


def per_seed(row, key: str) -> list[float | None]:
    """The row's per-seed values of metric ``key`` (``series["<key>_by_seed"]``), or its one value."""
    series = row.series if isinstance(row.series, dict) else {}
    stored = series.get(f"{key}_by_seed")
    if isinstance(stored, list):
        return stored
    return [row.metrics.get(key)]


def measures(extrapolate, interpolate) -> list[str]:
    """The perplexity metrics both rows hold, by mode, L_valid and k."""
    keys = [k for k in extrapolate.metrics if PERPLEXITY.match(k) and k in interpolate.metrics]

    def order(key):
        mode, lv, k = PERPLEXITY.match(key).groups()
        return mode, int(lv), int(k)

    return sorted(keys, key=order)


def label(key: str) -> str:
    mode, lv, k = PERPLEXITY.match(key).groups()
    return f"ppl {mode}, L_valid {lv}, k={k}"


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def verdict_tables(runs: Runs) -> list[Table]:
    """One table per (suite, hardware, L_train, bias dtype) whose rows hold both alibi recipes."""
    from posbench.report.grouping import by_params, task_groups

    out = []
    for suite, hardware, group in task_groups(runs.rows, "extension"):
        pairs: dict[tuple, dict] = {}
        for members in by_params(group).values():
            for r in members:
                recipe = r.params.get("recipe")
                if r.status == "ok" and r.method == "alibi" and recipe in RECIPES and isinstance(r.metrics, dict):
                    pairs.setdefault((r.params.get("L_train"), r.params.get("bias_dtype", "float32")), {})[recipe] = r
        for (L, dtype), both in pairs.items():
            if len(both) == len(RECIPES):
                out.append(_table(suite, hardware, L, dtype, both))
    return out


def _table(suite: str, hardware: str, L, dtype: str, both: dict) -> Table:
    from posbench.report.grouping import short_commit

    ext, itp = both["extrapolate"], both["interpolate"]
    t = Table(
        VERDICT_TABLE,
        key=slug(f"{suite}-alibi-interpolate-vs-extrapolate-L{L}-{dtype}-{hardware}"),
        title=f"ALiBi: interpolate against extrapolate (SambaNova's test), L_train {L}, bias {dtype}",
        columns=list(COLUMNS),
        hardware=hardware,
        commit=short_commit([ext.git_commit, itp.git_commit]),
        rest={"L_train": L, "bias_dtype": dtype},
    )
    seeds = 1
    for key in measures(ext, itp):
        a, b = per_seed(ext, key), per_seed(itp, key)
        name = label(key)
        t.rows.append(name)
        for column, row in (("extrapolate", ext), ("interpolate", itp)):
            mean, std = row.metrics.get(key), row.metrics.get(f"{key}_std")
            text = "-" if not _number(mean) else fmt.ppl(mean) + (f" ± {fmt.ppl(std)}" if _number(std) else "")
            t.cells[(name, column)] = Cell(
                text=text, value=mean if _number(mean) else None, case_id=row.case_id, run_id=row.run_id
            )
        diffs = [y - x for x, y in zip(a, b) if _number(x) and _number(y)] if len(a) == len(b) else []
        mean, _, n, lo, hi = seed_interval(diffs)
        seeds = max(seeds, n)
        if n == 0:
            text = "-"
        else:
            text = f"{mean:+.3f}" + ("" if lo is None else f" [{lo:+.3f}, {hi:+.3f}]")
        t.cells[(name, "interpolate - extrapolate")] = Cell(text=text, value=mean if n else None)
        said = verdict(lo, hi) if n else "-"
        t.cells[(name, "verdict")] = Cell(text=said)
        t.extra.setdefault("verdicts", {})[key] = said
    t.caption = (
        f"Perplexity of alibi's base model (trained at L_train = {L}) extended by extrapolating its positions "
        f"and by interpolating them (positions x L_train / L_target, SambaNova's recipe), each fine-tuned k "
        f"steps at L_target (k = 0: zero-shot); mean ± std over {seeds} seed(s). The difference is "
        f"interpolate - extrapolate, paired by seed, with its 95% t interval over seeds: negative favours "
        f"interpolation. Verdict: a recipe is better only when the interval excludes 0 (beyond the seed "
        f"spread), else '{NOT_SEPARABLE}'. {hardware} (commit {t.commit})."
    )
    return t
