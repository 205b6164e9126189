"""The corpus a table's rows trained and evaluated on, said in one sentence under the table.

Read from each row's ``settings.corpus`` (its kind, level and ``splits``), and where the row
recorded the corpus it opened (``series.corpus``, ``posbench.data.corpus.Corpus.describe``) the
files each split came from: WikiText-2 without a training file trains on its test split, and the
table says so. Rows without a corpus (a speed task's random tokens) add nothing.
"""

from __future__ import annotations

from pathlib import PurePath

from posbench.report.grouping import ordered


def _splits(row) -> dict:
    """split -> the file split it was read from, as the row recorded the corpus it opened, else as
    its settings asked; {} where neither says (a corpus's own splits)."""
    opened = row.series.get("corpus") if isinstance(row.series, dict) else None
    said = opened.get("settings") if isinstance(opened, dict) else None
    splits = said.get("splits") if isinstance(said, dict) else None
    if not isinstance(splits, dict):
        corpus = row.settings.get("corpus") if isinstance(row.settings, dict) else None
        splits = corpus.get("splits") if isinstance(corpus, dict) else None
    if not isinstance(splits, dict):
        return {}
    return {str(k): _files(v) for k, v in splits.items()}


def _files(value) -> str:
    """A split's source as a reader names it: a file split (``its test file``), or files by their
    names (a text corpus records paths: the machine's folders say nothing here)."""
    if isinstance(value, list):
        return ", ".join(PurePath(str(v)).name for v in value)
    return f"its {value} file"


def describe(row) -> str | None:
    """``wikitext-2 (word level; train split read from its test file)``, ``wikitext-103 (word
    level; its own train and valid splits)`` or ``synthetic (vocab 32; generated train and valid
    splits, seed 0)``; None for a row whose settings name no corpus."""
    corpus = row.settings.get("corpus") if isinstance(row.settings, dict) else None
    if not isinstance(corpus, dict) or not corpus.get("kind"):
        return None
    kind = str(corpus["kind"])
    parts = []
    if kind.startswith("synthetic"):
        options = corpus.get("synthetic") if isinstance(corpus.get("synthetic"), dict) else {}
        if "vocab" in options:
            parts.append(f"vocab {options['vocab']}")
        parts.append(f"generated train and valid splits, seed {corpus.get('seed', 0)}")
    else:
        level = corpus.get("level") or ("word" if kind.startswith("wikitext") else "byte")
        parts.append(f"{level} level")
        splits = _splits(row)
        moved = {k: v for k, v in splits.items() if v != f"its {k} file"}
        if moved:
            parts.append("; ".join(f"{k} split read from {v}" for k, v in moved.items()))
        else:
            parts.append("its own train and valid splits")
    return f"{kind} ({'; '.join(parts)})"


def corpus_line(rows) -> str:
    """``Corpus: ...`` naming every corpus the rows used (a table of several says each), "" when
    none of them names one."""
    said = ordered(d for d in (describe(r) for r in rows) if d)
    return f"Corpus: {'; '.join(said)}." if said else ""


def name_corpus(tables, frame) -> None:
    """Give each of ``tables`` the corpus of the rows its cells came from (``frame``: the runs'
    rows): ``Table.corpus``, which also ends its caption; a table that already names one is left."""
    by_key = {(r.run_id, r.case_id): r for r in frame.itertuples(index=False)}
    for table in tables:
        if table.corpus:
            continue
        keys = ordered((c.run_id, c.case_id) for c in table.cells.values())
        table.corpus = corpus_line([by_key[k] for k in keys if k in by_key])
        if table.corpus:
            table.caption = f"{table.caption} {table.corpus}".strip()
