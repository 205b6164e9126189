"""The findings that open docs/results/README.md (issue 69): answers to the project's questions,
computed from the published runs' tables, each linking the page that holds its table, each with
its interval or spread and "not separable" where the noise says so, and the seed papers' claims
marked reproduced, not reproduced or not measurable. Where no published run answers a question,
the line names the suite to run. The questions name the shipped suites, so they live with the
CLI's other claims about them (``references``), and ``docs_results`` hands ``findings`` to the
task-agnostic page writer (``posbench.report.results_page``).

A ratio is the one the page's table prints where the run paired its methods (speed, decoding):
the median of per-window (per-round) ratios with its bootstrap 95% interval, read off the cell
(its ratio to the baseline, or the floor's in square brackets) or, for a pair no column shows
(ALiBi against T5 bias), formed the same way from the run's rows (``posbench.report.pairs``).
Memory, one measurement per process, is judged by its resolution (``posbench.report.resolution``):
a difference under it is "not separable". Only where nothing is paired does a ratio's interval
come from the two cells' spreads (min-max over measured windows, or ± std over seeds):
``[lo_a / hi_b, hi_a / lo_b]``. An interval holding 1 is "not separable"; a ratio without one
(one window, one seed) is said as such, and no claim is judged on it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from posbench.report import numbers as fmt
from posbench.report.escape import md_code, md_text
from posbench.report.pairs import paired_cell
from posbench.report.results_page import Source
from posbench.report.table import Cell

COST_LENGTH = 2048  # the length the cost question asks about
FLOOR = "nope"  # the method costs are measured against (no position work at all)
EXTRAPOLATION_FACTOR = 8  # perplexity from L_train to 8 L_train
HOLDS = 1.05  # perplexity at 8x within 5% of L_train's: the method holds


@dataclass(frozen=True)
class Asked:
    """Which task's tables answer a question, the suite that runs them, and its command."""

    task: str
    suite: str
    command: str

    def missing(self, what: str) -> str:
        return f"{what}: no published {self.suite} run; run `{self.command}`."


QUESTIONS_FILE = Path(__file__).resolve().parents[1] / "findings.yaml"


def _asked(path: Path = QUESTIONS_FILE) -> dict[str, Asked]:
    """``posbench/findings.yaml``: question key -> ``Asked`` (data, read with safe_load)."""
    said = yaml.safe_load(path.read_text())
    return {key: Asked(str(v["task"]), str(v.get("suite", v["task"])), str(v["command"])) for key, v in said.items()}


ASKED = _asked()


SPREAD, PAIRED, UNPAIRED, RESOLUTION = "spread", "paired", "unpaired", "resolution"  # how a Ratio was formed
HOW = {
    PAIRED: "paired as in the table: median of per-window or per-round ratios, bootstrap 95% interval",
    UNPAIRED: "unpaired ratios (timed apart) with their bootstrap 95% interval",
    SPREAD: "intervals from the two cells' spreads",
}


@dataclass(frozen=True)
class Ratio:
    """``a / b`` with its interval (None where there is none) and how it was formed (``kind``):
    ``PAIRED``/``UNPAIRED`` as a table prints it, ``SPREAD`` from the cells' spreads,
    ``RESOLUTION`` memory whose interval is where the two values are within the resolution."""

    value: float
    interval: tuple[float, float] | None
    kind: str = SPREAD

    def text(self) -> str:
        if self.kind == RESOLUTION:  # its interval is no confidence interval: not printed
            return f"{self.value:.2f}x" + (" not separable" if self.above() is None else "")
        if self.interval is None:
            return f"{self.value:.2f}x (no interval: one window or seed)"
        lo, hi = self.interval
        said = fmt.ratio_text(self.value, self.interval, self.kind == UNPAIRED) if self.kind != SPREAD else None
        said = said or f"{self.value:.2f}x [{lo:.2f}, {hi:.2f}]"
        return said + (" not separable" if lo <= 1.0 <= hi else "")

    def above(self, bound: float = 1.0) -> bool | None:
        """Whether the whole interval lies above ``bound`` (None: no interval, or it holds ``bound``)."""
        if self.interval is None or self.interval[0] <= bound <= self.interval[1]:
            return None
        return self.interval[0] > bound


def ratio(a: Cell, b: Cell) -> Ratio | None:
    """``a / b`` of two cells' values, with the interval their spreads give."""
    if a.value is None or b.value is None or b.value == 0:
        return None
    interval = None
    if a.spread is not None and b.spread is not None and min(b.spread) > 0:
        interval = (a.spread[0] / b.spread[1], a.spread[1] / b.spread[0])
    return Ratio(a.value / b.value, interval)


def _from_cell(cell: Cell) -> Ratio:
    """A cell's ratio to its table's baseline, as the table prints it."""
    return Ratio(cell.ratio, cell.ratio_interval, UNPAIRED if cell.unpaired else PAIRED)


def against(source: Source, method: str, other: str, column) -> Ratio | None:
    """``method`` over ``other`` at ``column`` of ``source``'s table: memory judged by its resolution;
    else the paired ratio the table prints (its baseline's, or the floor's in square brackets) or
    forms the same way from the run's rows; else the ratio of the two cells' spreads."""
    t = source.table
    a, b = t.cell(method, column), t.cell(other, column)
    if a.resolution is not None and b.resolution is not None and a.value and b.value:
        (a_lo, a_hi), (b_lo, b_hi) = a.resolution, b.resolution  # the bands overlap: the interval holds 1
        return Ratio(a.value / b.value, (a_lo / b_hi, a_hi / b_lo), RESOLUTION)
    if other == t.baseline and a.ratio is not None and a.ratio_interval is not None:
        return _from_cell(a)
    cell = paired_cell(source.rows, t, method, other, column)
    if cell is not None and cell.ratio_interval is not None:
        return _from_cell(cell)
    kept = t.extra.get("floor_ratios", {}).get(f"{method}@{column}") if other == t.extra.get("floor") else None
    if kept is not None and kept[1] is not None:  # no rows to pair from: the figures the table prints
        return Ratio(kept[0], (kept[1], kept[2]), PAIRED)
    return ratio(a, b)


def how(ratios: Iterable[Ratio], resolution: str = "") -> str:
    """What a line's ratios are, in words (the kinds among them)."""
    kinds = list(dict.fromkeys(r.kind for r in ratios))
    said = [f"differences under {resolution or 'the resolution'} not claimed" if k == RESOLUTION else HOW[k] for k in kinds]
    return "; ".join(said)


def _link(source: Source) -> str:
    return f"([table]({source.link}))"


def _tables(sources: Iterable[Source], task: str, metric: str) -> list[Source]:
    return [s for s in sources if s.table.task == task and s.table.metric == metric]


def compiled(source: Source) -> bool:
    """Whether the run's cases ran under ``torch.compile`` (its settings' ``compile``): a compiled
    and an eager run of one suite give cost lines that must not read alike."""
    rows = source.rows
    if rows is None or "settings" not in getattr(rows, "columns", ()):
        return False
    return any(isinstance(s, dict) and s.get("compile") is True for s in rows["settings"])


def _eager_first(sources: Iterable[Source]) -> list[Source]:
    return sorted(sources, key=compiled)  # stable: the pages' order within eager and compiled


def cost_lines(sources: list[Source]) -> list[str]:
    """What each method costs against ``FLOOR`` at ``COST_LENGTH`` (or the longest L measured),
    eager runs first; a compiled run's lines say so."""
    out = []
    for metric, what in (
        ("train_wps", "training speed"),
        ("eval_wps", "evaluation speed"),
        ("peak_mem_train_bytes", "training memory"),
    ):
        for source in _eager_first(_tables(sources, ASKED["cost"].task, metric)):
            t = source.table
            lengths = [c for c in t.columns if isinstance(c, (int, float))]
            if FLOOR not in t.rows or not lengths:
                continue
            length = COST_LENGTH if COST_LENGTH in lengths else max(lengths)
            ratios = {m: against(source, m, FLOOR, length) for m in t.rows if m != FLOOR}
            ratios = {m: r for m, r in ratios.items() if r is not None}
            parts = "; ".join(f"{md_text(m)} {r.text()}" for m, r in ratios.items())
            short = "" if length == COST_LENGTH else f" (the longest published; L {COST_LENGTH} needs `{ASKED['cost'].command}`)"
            said = how(ratios.values(), t.resolution)
            mode = ", compiled" if compiled(source) else ""
            out.append(
                f"{what.capitalize()} at L {length}{short}{mode}, against {FLOOR}"
                + (f" ({said})" if said else "")
                + f": {parts} "
                f"{_link(source)}"
            )
    return out or [ASKED["cost"].missing(f"Cost against {FLOOR}")]


def _l_train(source: Source) -> int | None:
    value = source.table.rest.get("L_train")
    return int(value) if isinstance(value, (int, float)) else None


def hold_ratios(source: Source, l_train: int) -> tuple[int, dict[str, Ratio]] | None:
    """(the longest L_valid up to 8 L_train, method -> perplexity there / at L_train)."""
    t = source.table
    lengths = [c for c in t.columns if isinstance(c, (int, float)) and l_train < c <= EXTRAPOLATION_FACTOR * l_train]
    if l_train not in t.columns or not lengths:
        return None
    far = max(lengths)
    out = {}
    for method in t.rows:
        r = ratio(t.cell(method, far), t.cell(method, l_train))
        if r is not None and not method.startswith("bound"):
            out[method] = r
    return far, out


def perplexity_sources(sources: list[Source]) -> list[tuple[Source, int]]:
    """The perplexity-against-length tables with their L_train (the table's, else its key's ``-l<N>-``)."""
    out = []
    for source in _tables(sources, ASKED["perplexity"].task, "ppl"):
        l_train = _l_train(source)
        if l_train is None:
            key = source.table.key.split("-")
            l_train = next((int(k[1:]) for k in key if k.startswith("l") and k[1:].isdigit()), None)
        if l_train is not None and source.table.column_header == "L_valid":
            out.append((source, l_train))
    return out


def _evaluation(source: Source) -> str:
    """ ", nonoverlapping evaluation" or ", sliding evaluation" from the table's key (``-nonoverlapping``,
    ``-sliding-s16``): a run's two perplexity tables would otherwise give two lines with one label."""
    key = source.table.key.split("-")
    mode = next((k for k in key if k in ("nonoverlapping", "sliding")), None)
    return f", {mode} evaluation" if mode else ""


def perplexity_lines(sources: list[Source]) -> list[str]:
    out = []
    for source, l_train in perplexity_sources(sources):
        found = hold_ratios(source, l_train)
        if found is None:
            continue
        far, ratios = found
        parts = "; ".join(f"{md_text(m)} {r.text()}" for m, r in ratios.items())
        how = _evaluation(source)
        given = f"; method options {md_text(source.options)}" if source.options else ""
        out.append(f"Perplexity at L {far} over L_train {l_train}{how} ({md_text(source.suite)}{given}): {parts} {_link(source)}")
    return out or [ASKED["perplexity"].missing("Perplexity beyond L_train")]


def retrieval_lines(sources: list[Source]) -> list[str]:
    out = []
    for source in sources:
        t = source.table
        if t.task != ASKED["probes"].task or not t.metric.startswith("acc ") or "effective length" not in t.columns:
            continue
        probe = t.metric.removeprefix("acc ")
        lengths = ", ".join(f"{md_text(m)} {md_text(t.cell(m, 'effective length').text)}" for m in t.rows)
        out.append(
            f"Effective length on {md_code(probe)} ({md_text(source.suite)}; accuracy with its Wilson interval on the page): "
            f"{lengths} {_link(source)}"
        )
    return out or [ASKED["probes"].missing("Probes beyond L_train")]


def decode_lines(sources: list[Source]) -> list[str]:
    """Each method's time per output token against the run's baseline, at the longest context."""
    out = []
    for source in _tables(sources, ASKED["decoding"].task, "tpot_ms"):
        t = source.table
        lengths = [c for c in t.columns if isinstance(c, (int, float))]
        if not lengths or t.baseline is None:
            continue
        far = max(lengths)
        ratios = {m: _from_cell(t.cell(m, far)) for m in t.rows if m != t.baseline and t.cell(m, far).ratio is not None}
        parts = "; ".join(f"{md_text(m)} {r.text()}" for m, r in ratios.items())
        rest = "".join(f", {md_text(k)} {md_text(v)}" for k, v in t.rest.items())
        said = how(r for r in ratios.values() if r.interval is not None)
        out.append(
            f"Time per output token at {md_text(t.column_header)} {far}{rest}, against {md_text(t.baseline)}"
            + (f" ({said})" if said else "")
            + f": {parts or 'no ratio'} {_link(source)}"
        )
    return out or [ASKED["decoding"].missing("Cost per generated token")]


EQUAL_COMPUTE = ("time_s=", "flops=")  # a frontier's budget that equalises compute (not steps or tokens)


def frontier_lines(sources: list[Source]) -> list[str]:
    """Each equal-compute frontier table's best method and how many others its noise separates."""
    out = []
    for source in (s for s in sources if s.table.metric == "frontier"):
        t = source.table
        if not any(budget in t.title for budget in EQUAL_COMPUTE) or "verdict" not in t.columns:
            continue
        verdicts = {row: t.cell(row, "verdict").text for row in t.rows}
        best = [row for row, text in verdicts.items() if text == "best"]
        close = [row for row, text in verdicts.items() if text.startswith("not separable")]
        worse = len(verdicts) - len(best) - len(close)
        head = t.title.split(":")[0]
        if not best:
            out.append(f"{md_text(head)}: no best method (none is separable from the others) {_link(source)}")
            continue
        value = t.cell(best[0], t.columns[0]).text
        out.append(
            f"{md_text(head)}: best {md_text(best[0])} ({md_text(t.columns[0])} {md_text(value)}); "
            f"not separable from it: {', '.join(md_text(r) for r in close) or 'none'}; worse beyond the noise: {worse} "
            f"{_link(source)}"
        )
    return out or [ASKED["frontier"].missing("Equal-compute winners")]


def _claim(name: str, verdict: str, why: str) -> str:
    return f"**{name}**: {verdict} ({why})"


def claim_lines(sources: list[Source]) -> list[str]:
    """The seed papers' claims, each judged from the rows or marked not measurable."""
    out = []
    holds = [(s, l, hold_ratios(s, l)) for s, l in perplexity_sources(sources)]
    holds = [(s, l, h[1]) for s, l, h in holds if h is not None and {"sinusoidal", "alibi"} <= set(h[1])]
    if not holds:
        why = f"no published run with sinusoidal and alibi beyond L_train; run `{ASKED['perplexity'].command}`"
        out += [
            _claim("ALiBi: sinusoidal fails beyond L_train", "not measurable", why),
            _claim("ALiBi holds beyond L_train", "not measurable", why),
        ]
    else:
        source, _l, ratios = min(holds, key=_claim_evidence)
        sin, alibi = ratios["sinusoidal"], ratios["alibi"]
        fails = sin.above(HOLDS)
        verdict = {True: "reproduced", False: "not reproduced", None: "not measurable at this scale"}[fails]
        out.append(_claim("ALiBi: sinusoidal fails beyond L_train", verdict, f"sinusoidal {sin.text()} {_link(source)}"))
        held = alibi.above(HOLDS)
        verdict = {False: "reproduced", True: "not reproduced", None: "not measurable at this scale"}[held]
        out.append(_claim("ALiBi holds beyond L_train", verdict, f"alibi {alibi.text()} {_link(source)}"))
    out.append(_faster_claim(sources))
    out.append(_interpolation_claim(sources))
    return out


def _claim_evidence(hold: tuple) -> tuple[bool, bool, bool]:
    """Which perplexity table judges ALiBi's claims (the smallest key first): one whose sinusoidal
    and alibi ratios both have intervals (seeds) before one without, the perplexity question's own
    suite before another (dependency's long-copy run), the paper's nonoverlapping evaluation first."""
    source, _l_train, ratios = hold
    no_interval = any(ratios[m].interval is None for m in ("sinusoidal", "alibi"))
    return no_interval, source.suite != ASKED["perplexity"].suite, "sliding" in source.table.key


def _interpolation_claim(sources: list[Source]) -> str:
    """SambaNova's claim from the verdict table of ALiBi interpolate vs extrapolate (paired by seed):
    reproduced where every row says interpolation is better beyond the seed spread, not
    reproduced where every row says extrapolating is, else not separable at this scale."""
    name = "SambaNova: interpolating ALiBi beats extrapolating it"
    asked = ASKED["interpolation"]
    for source in sources:
        t = source.table
        if t.task != asked.task or t.metric != "interpolate vs extrapolate" or "verdict" not in t.columns:
            continue
        said = [t.cell(row, "verdict").text for row in t.rows]
        if not said or not all(v.endswith("better") for v in said):
            return _claim(name, "not separable at this scale", f"{len(t.rows)} rows {_link(source)}")
        wins = {v.split()[0] for v in said}
        verdict = {"interpolate": "reproduced", "extrapolate": "not reproduced"}.get(wins.pop()) if len(wins) == 1 else None
        return _claim(name, verdict or "mixed: see the table", f"{len(t.rows)} rows, each {said[0]} {_link(source)}")
    return _claim(name, "not measurable", f"no published run of it; run `{asked.command}`")


def _faster_claim(sources: list[Source]) -> str:
    """ALiBi against T5 bias at the longest L of a published cost run: speed by the paired
    ratio and its interval (``against``), memory by its resolution. Reproduced where ALiBi is
    faster beyond the interval and lighter beyond the resolution; not reproduced where either
    points the other way beyond the noise; else not separable at this scale."""
    name = "ALiBi trains faster, with less memory, than T5 bias"
    for speed in _eager_first(_tables(sources, ASKED["cost"].task, "train_wps")):  # eager first: the paper predates torch.compile
        t = speed.table
        lengths = [c for c in t.columns if isinstance(c, (int, float))]
        if not {"alibi", "t5_bias"} <= set(t.rows) or not lengths:
            continue
        length = max(lengths)
        faster = against(speed, "alibi", "t5_bias", length)
        memory = next(
            (
                m
                for m in _tables(sources, ASKED["cost"].task, "peak_mem_train_bytes")
                if (m.link, m.table.rest) == (speed.link, t.rest)
            ),
            None,
        )
        less = against(memory, "alibi", "t5_bias", length) if memory is not None else None
        if faster is None or less is None:
            continue
        quicker, heavier = faster.above(), less.above()
        mode = ", compiled" if compiled(speed) else ""
        why = f"at L {length}{mode}: speed alibi / t5_bias {faster.text()}, memory {less.text()} {_link(speed)}"
        if quicker is False or heavier is True:
            return _claim(name, "not reproduced", why)
        return _claim(name, "reproduced" if quicker and heavier is False else "not separable at this scale", why)
    return _claim(name, "not measurable", f"no published {ASKED['cost'].suite} run with both; run `{ASKED['cost'].command}`")


def findings(sources: list[Source]) -> list[tuple[str, list[str]]]:
    """(question, lines) for the index, in the order a reader asks them."""
    return [
        (f"What each method costs against {FLOOR}", cost_lines(sources)),
        (f"How perplexity holds from L_train to {EXTRAPOLATION_FACTOR}x", perplexity_lines(sources)),
        ("Which methods keep each probe beyond L_train", retrieval_lines(sources)),
        ("Which win at equal compute", frontier_lines(sources)),
        ("What each costs per generated token", decode_lines(sources)),
        ("The seed papers' claims", claim_lines(sources)),
    ]
