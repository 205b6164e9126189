"""posbench.tasks.extrapolation.bucket_coverage: the distance buckets T5's bias never trains at a
short L_train, recorded per row and named in the perplexity table's caption."""

import pytest

from posbench.core.model import build_model, model_config
from posbench.report.build import load_runs
from posbench.tasks import find as find_task
from posbench.tasks.extrapolation.bucket_coverage import caption_note, untrained_buckets
from posbench.tasks.extrapolation.ppl_tables import extrapolation_tables
from tests.helpers.report_rows import extrapolation_rows, write_run


def _method(name, **options):
    return build_model(model_config("tiny", name, vocab_size=16, n_layers=1, method_options=options)).method


@pytest.mark.parametrize(
    "L_train, untrained, first",
    [
        (64, [27, 28, 29, 30, 31], 67),  # distances 0-63 reach buckets 0-26 only; 27 starts at 67
        (100, [31], 113),  # the clamp bucket starts at 113
        (114, [], None),
        (512, [], None),
    ],
)
def test_t5_buckets_left_untrained_at_L_train(L_train, untrained, first):
    got = untrained_buckets(_method("t5_bias"), L_train)
    assert got == {"untrained": untrained, "num_buckets": 32, "first_distance": first}


def test_other_bucketings_and_methods_without_buckets():
    got = untrained_buckets(_method("t5_bias", num_buckets=8, max_distance=16), 8)
    assert got["num_buckets"] == 8 and got["untrained"] and got["first_distance"] >= 8
    assert untrained_buckets(_method("alibi"), 64) is None and untrained_buckets(_method("rotary"), 64) is None


def test_caption_note_names_the_limit_and_skips_what_is_not_a_record():
    note = caption_note("t5_bias", 64, {"untrained": [27, 28, 29, 30, 31], "num_buckets": 32, "first_distance": 67})
    assert (
        note.startswith("t5_bias: 5 of its 32 distance buckets (every distance >= 67) were never trained at L_train = 64")
        and "L_train >= 512" in note
    )
    # issue 65: with every bucket trained (max_distance 32) t5_bias degraded as much, so the
    # caption no longer calls the untrained buckets the reason ("a limit of this set-up")
    assert "not of the method" not in note and "with every bucket reached (max_distance 32) it degraded as much" in note
    for stored in (
        None,
        {},
        {"untrained": [], "num_buckets": 32, "first_distance": None},
        "x",
        {"untrained": [True], "num_buckets": 32, "first_distance": 67},
        {"untrained": [27], "num_buckets": 32, "first_distance": -1},
    ):
        assert caption_note("t5_bias", 64, stored) == ""


def test_the_perplexity_table_caption_carries_the_note(tmp_path):
    rows = extrapolation_rows()
    rows[0]["series"]["untrained_buckets"] = {"untrained": [27, 28, 29, 30, 31], "num_buckets": 32, "first_distance": 67}
    rows[1]["series"]["untrained_buckets"] = None
    tables = extrapolation_tables(load_runs(write_run(tmp_path, rows), find_task=find_task))
    for table in tables:
        assert table.caption.count("were never trained at L_train = 64") == 1
        assert f"{rows[0]['method']}: 5 of its 32 distance buckets" in table.caption
