"""Every table names the corpus its rows trained and evaluated on (issue 66, item 7), read from the
rows' settings.corpus and, where a row recorded it, the files each split was read from."""

from __future__ import annotations

from types import SimpleNamespace

from posbench.report.rows import load_runs
from posbench.report.sections import collect_sections
from posbench.report.table_corpus import corpus_line, describe, name_corpus
from posbench.report.tabulate import run_tables
from posbench.tasks import find as find_task
from tests.helpers.report_rows import efficiency_rows, extrapolation_rows, write_run


def _row(corpus=None, opened=None):
    return SimpleNamespace(settings={"corpus": corpus} if corpus else {}, series={"corpus": opened} if opened else {})


def test_a_corpus_is_named_with_where_its_splits_came_from():
    wt103 = {"kind": "wikitext-103", "path": None, "level": None, "splits": None}
    assert describe(_row(wt103)) == "wikitext-103 (word level; its own train and valid splits)"
    # WikiText-2 without a training file trains on its test split: the corpus the row opened says so
    wt2 = {"kind": "wikitext-2", "splits": None}
    opened = {"settings": {"level": "word", "splits": {"train": "test", "valid": "valid"}}}
    assert describe(_row(wt2, opened)) == "wikitext-2 (word level; train split read from its test file)"
    # a text corpus records its files' paths: the table names the files, not the machine's folders
    text = {"kind": "text", "level": "byte", "splits": {"train": "test.txt", "valid": "valid.txt"}}
    opened = {"settings": {"level": "byte", "splits": {"train": ["/data/x/test.txt"], "valid": ["/data/x/valid.txt"]}}}
    assert describe(_row(text, opened)) == "text (byte level; train split read from test.txt; valid split read from valid.txt)"
    synthetic = {"kind": "synthetic-copy", "seed": 0, "synthetic": {"vocab": 64}}
    assert describe(_row(synthetic)) == "synthetic-copy (vocab 64; generated train and valid splits, seed 0)"
    assert describe(_row()) is None and corpus_line([_row()]) == ""
    # a table of rows of two corpora names both, once each
    both = corpus_line([_row(wt103), _row(synthetic), _row(wt103)])
    assert both.startswith("Corpus: wikitext-103 (") and both.count("wikitext-103") == 1 and "synthetic-copy" in both


def test_report_and_console_tables_name_the_corpus_of_their_rows(tmp_path):
    rows = extrapolation_rows()
    for row in rows:
        row["settings"] = {"corpus": {"kind": "wikitext-103", "splits": None}}
    run = write_run(tmp_path / "x", rows, metrics=["ppl_at_train_len", "ppl_at_max_len"])
    runs = load_runs(run, find_task=find_task)
    tables = [b.table for s in collect_sections(runs) for b in s.blocks]
    assert tables and all(t.corpus == "Corpus: wikitext-103 (word level; its own train and valid splits)." for t in tables)
    assert all(t.caption.endswith(t.corpus) for t in tables)
    console = run_tables(runs)
    assert console and all(t.corpus for t in console)
    # efficiency's rows name no corpus (random tokens): nothing is added
    eff = load_runs(write_run(tmp_path / "e", efficiency_rows()), find_task=find_task)
    assert all(not b.table.corpus and "Corpus:" not in b.table.caption for s in collect_sections(eff) for b in s.blocks)


def test_name_corpus_leaves_a_table_that_names_one():
    table = SimpleNamespace(corpus="Corpus: mine.", caption="c", cells={})
    name_corpus([table], SimpleNamespace(itertuples=lambda index: iter([])))
    assert table.corpus == "Corpus: mine." and table.caption == "c"
