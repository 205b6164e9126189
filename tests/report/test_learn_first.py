"""posbench.report.learn_first: the learn-first rule every accuracy task shares (learned,
length_text, comparable_length, comparability with its note and broken-profile mark)."""

import math

import pytest

from posbench.report.learn_first import BROKEN, NOT_LEARNT, comparability, comparable_length, learned, length_text


@pytest.mark.parametrize(
    "accuracy, threshold, expected",
    [
        (0.9, 0.9, True),
        (0.8999, 0.9, False),
        (1.0, 0.9, True),
        (0.0, 0.0, True),
        (0.0, 0.5, False),
        (None, 0.9, None),
        (math.nan, 0.9, None),
        (math.inf, 0.9, None),
        (True, 0.9, None),
        ("0.95", 0.9, None),
    ],
)
def test_learned_is_accuracy_at_least_threshold_and_unknown_without_a_number(accuracy, threshold, expected):
    assert learned(accuracy, threshold) is expected


@pytest.mark.parametrize("threshold", [-0.1, 1.5])
def test_learned_rejects_a_threshold_outside_0_1_in_one_line(threshold):
    with pytest.raises(ValueError, match=r"learned_threshold must lie in \[0, 1\]"):
        learned(0.5, threshold)


def test_length_text_and_comparable_length_hide_the_length_of_a_model_that_did_not_learn():
    assert length_text(True, 128) == "128"
    assert length_text(False, 128) == NOT_LEARNT == "not learnt at L_train"
    assert length_text(False, None) == NOT_LEARNT
    assert length_text(None, 64) == "-" and length_text(True, None) == "-"
    assert comparable_length(True, 128) == 128
    assert comparable_length(False, 128) is None and comparable_length(None, 64) is None


def test_comparability_counts_and_names_the_methods_that_did_not_learn():
    c = comparability({"alibi": True, "nope": True, "rotary": False, "t5_bias": None}, 0.9)
    assert (c.learnt, c.not_learnt, c.unknown, c.total) == (["alibi", "nope"], ["rotary"], ["t5_bias"], 4)
    assert not c.broken and c.title_suffix() == ""
    assert c.note() == (
        "2 of 4 learnt the task at L_train (accuracy >= 90%) and are compared beyond it; "
        "not learnt at L_train: rotary; no accuracy at L_train: t5_bias."
    )


@pytest.mark.parametrize(
    "verdicts, broken",
    [
        ({"a": False, "b": False}, True),
        ({"a": True, "b": False}, True),
        ({"a": True, "b": True, "c": False}, False),
        ({"a": True}, False),
        ({"a": False}, True),
        ({"a": None, "b": None}, True),
        ({}, False),
    ],
)
def test_a_profile_where_fewer_than_two_methods_learnt_is_broken_and_says_so_loudly(verdicts, broken):
    c = comparability(verdicts, 0.5)
    assert c.broken is broken
    assert c.note().startswith(BROKEN) is broken
    assert (BROKEN in c.title_suffix()) is broken
    if broken:
        assert f"{len(c.learnt)} of {c.total} learnt" in c.title_suffix()


def test_ppl_learned_against_peers_and_bound():
    from posbench.report.learn_first import ppl_learned, ppl_verdicts

    assert ppl_learned(23.1, 14.1, 7.65) is False  # issue 66: > 1.5 x the best peer
    assert ppl_learned(14.1, 14.1, 7.65) is True  # < 2 x the bound
    assert ppl_learned(16.0, 14.1, 7.65) is False  # > 2 x the bound, though within 1.5x the best
    assert ppl_learned(30.0, 25.0, None) is True  # no bound (WikiText): the peers alone decide
    assert ppl_learned(None, 14.1, 7.65) is None and ppl_learned(float("nan"), 14.1, None) is None
    verdicts = ppl_verdicts(
        {
            "sinusoidal": {"ppl_at_train_len": 23.1, "best_ppl_eval": 7.65},
            "alibi": {"ppl_at_train_len": 14.1, "best_ppl": 7.65},
            "rotary": {"ppl_at_train_len": None},
        }
    )
    assert verdicts == {"sinusoidal": False, "alibi": True, "rotary": None}


def test_a_rule_in_words_replaces_the_threshold_in_the_note():
    from posbench.report.learn_first import PPL_RULE

    note = comparability({"a": True, "b": False}, 0.0, measure="perplexity", rule=PPL_RULE).note()
    assert note.startswith(f"{BROKEN}: 1 of 2 learnt the task at L_train ({PPL_RULE})")
