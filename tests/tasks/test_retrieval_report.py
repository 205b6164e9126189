"""The retrieval report's probe tables name the scoring rule their rows were counted with."""

from posbench.tasks.retrieval import report
from tests.helpers.report_rows import base_row


def _row(method, scoring=None, hops=None):
    cell = {"L_valid": 8, "depth": None, "correct": 7, "total": 16, "status": "ok", "message": ""}
    if hops:
        cell["hops"] = hops
    series = {"cells": [cell]} | ({"scoring": scoring} if scoring else {})
    return base_row("ruler", "retrieval", method, {"L_train": 8, "probe": "vartrack"}, "r", series=series)


def test_the_probe_tables_name_rulers_scoring_rule():
    t = report.probe_table([_row("alibi", "string_match_all", hops=2)], "vartrack")
    assert "vartrack reference items found, scored by RULER's string_match_all" in t.caption
    assert t.cell("alibi", 8).value == 7 / 16  # the share of the items found
    hops = report.hops_probe_table([_row("alibi", "string_match_all", hops=2)], "vartrack")
    assert "string_match_all" in hops.caption


def test_rows_without_a_rule_were_scored_exactly_and_mixed_rules_are_named():
    assert "Fraction of vartrack answers exactly right" in report.probe_table([_row("alibi")], "vartrack").caption
    part = report.probe_table([_row("alibi", "string_match_part")], "vartrack").caption
    assert "scored by RULER's string_match_part" in part
    mixed = report.probe_table([_row("alibi", "string_match_all"), _row("rotary")], "vartrack").caption
    assert "answers scored by several rules, pooled (string_match_all, exact)" in mixed
