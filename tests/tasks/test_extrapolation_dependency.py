"""Loss by dependency distance: the log-uniform copy distances of synthetic-copy, the known copy
distance of every evaluation token, the buckets, per-bucket perplexity against a hand-computed case,
a tiny run with ``by_distance`` and its table and chart."""

import math

import numpy as np
import pytest

from posbench.data import synthetic_copy as sc
from posbench.data.corpus import load_corpus
from posbench.protocols.distances import buckets
from posbench.report.rows import load_runs
from posbench.tasks import find as find_task
from posbench.tasks.extrapolation import dependency as D
from posbench.tasks.extrapolation.distance_report import copy_gain_tables, distance_chart, distance_tables
from posbench.tasks.extrapolation.ppl_tables import BOUND_ROW
from tests.helpers.cases import TINY, make_case
from tests.helpers.report_rows import base_row, write_run


def test_log_uniform_distances_put_equal_mass_on_every_doubling():
    w = sc.distance_weights(1023, 1.0, "log-uniform")  # d = 1..1023: ten doublings [2^k, 2^(k+1))
    masses = [w[2**k - 1 : 2 ** (k + 1) - 1].sum() for k in range(10)]
    assert np.allclose(masses, 0.1) and w.sum() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="distance one of decay, log-uniform; .*distance='linear'"):
        sc.make_source(**{**sc.DEFAULTS, "distance": "linear"}, seed=0)


def test_sampled_distances_are_the_copies_the_stream_holds():
    source = sc.make_source(**{**sc.DEFAULTS, "vocab": 256, "max_distance": 512, "distance": "log-uniform"}, seed=1)
    x, d = source.sample_with_distances(4, 3000, seed=2)
    assert np.array_equal(x, source.sample(4, 3000, seed=2))  # the same streams as before distances were kept
    s, t = np.nonzero(d)
    assert (x[s, t] == x[s, t - d[s, t]]).all() and (d[s, t] <= np.minimum(t, 512)).all()
    assert abs((d > 0).mean() - 0.5) < 0.02  # copy_prob
    late = d[:, 1000:][d[:, 1000:] > 0]  # past t = 512 every distance 1..512 is open: log-uniform
    assert abs((late > 64).mean() - math.log(513 / 65) / math.log(513)) < 0.03


def test_the_corpus_regenerates_the_copy_distances_of_its_evaluation_split():
    corpus = load_corpus("synthetic-copy", size=20_000, vocab=128, max_distance=300, distance="log-uniform")
    valid, d = corpus.split("valid"), corpus.copy_distances("valid")
    t = np.flatnonzero(d)
    assert len(d) == len(valid) and (valid[t] == valid[t - d[t]]).all() and d.max() > 64
    assert corpus.copy_distances("train") is None and load_corpus("synthetic", size=5000).copy_distances("valid") is None


def test_buckets_go_by_eight_to_L_train_then_double():
    assert buckets(64, 1024) == [(1, 8), (9, 64), (65, 128), (129, 256), (257, 512), (513, 1024)]
    assert buckets(100, 400) == [(1, 8), (9, 64), (65, 100), (101, 200), (201, 400)]
    assert buckets(64, 64) == [(1, 8), (9, 64)]


def test_per_bucket_perplexity_against_a_hand_computed_case():
    # Two windows of 4 tokens (L_train 2): scored stream indices 1, 2, 3 and 5, 6, 7 at window positions 1, 2, 3.
    loss = np.array([[0.1, 0.2, 0.38], [0.4, 0.5, 0.6]])
    bound = np.array([np.nan, 0.05, 0.15, 0.25, 9.0, 0.35, 0.45, 0.55])
    distance = np.array([0, 1, 0, 3, 2, 5, 2, 0])  # index 5 copies from 5 back: before its window
    got = {e["bucket"]: e for e in D.summarize(loss, bound, distance, 4, 2, 4)}
    want = {  # bucket: (tokens, model loss, source loss)
        "1-2": (2, (0.1 + 0.5) / 2, (0.05 + 0.45) / 2),  # indices 1 (d 1) and 6 (d 2)
        "3-4": (1, 0.38, 0.25),  # index 3 (d 3 at position 3)
        D.WITHIN: (2, (0.1 + 0.5) / 2, (0.05 + 0.45) / 2),  # d <= L_train = 2: the "1-2" tokens
        D.BEYOND: (1, 0.38, 0.25),
        D.NO_COPY: (2, (0.2 + 0.6) / 2, (0.15 + 0.55) / 2),
        D.OUTSIDE: (1, 0.4, 0.35),
    }
    assert list(got) == list(want)
    for bucket, (n, model, source) in want.items():
        e = got[bucket]
        assert (
            e["tokens"] == n and e["ppl"] == pytest.approx(math.exp(model)) and e["bound_ppl"] == pytest.approx(math.exp(source))
        )
    # copy gain against the model's loss on the copies it cannot see (0.4): (0.4 - loss) / (0.4 - bound)
    assert got[D.WITHIN]["gain"] == pytest.approx((0.4 - 0.3) / (0.4 - 0.25))
    assert got[D.BEYOND]["gain"] == pytest.approx((0.4 - 0.38) / (0.4 - 0.25))
    assert got[D.NO_COPY]["gain"] is None and got[D.OUTSIDE]["gain"] is None
    assert D.far_metrics(list(got.values())) == {
        "ppl_far@4": got[D.BEYOND]["ppl"],
        "bound_far@4": got[D.BEYOND]["bound_ppl"],
        "copy_gain_far@4": pytest.approx(0.02 / 0.15),
    }  # no copy_gain_within: it is read at L_valid = L_train (2), and this case scores L_valid 4 only


def test_copy_gain_gates_learn_first_and_combines_over_seeds():
    def entry(bucket, loss, bound, lv=8, hi=None):
        return {
            "L_valid": lv,
            "bucket": bucket,
            "lo": 1,
            "hi": hi,
            "tokens": 5,
            "loss": loss,
            "ppl": math.exp(loss),
            "bound_loss": bound,
        }

    seed0 = D.with_gains([entry(D.WITHIN, 1.0, 0.5, hi=8), entry(D.OUTSIDE, 2.0, 1.5)])  # gain (2-1)/(2-0.5) = 2/3
    seed1 = D.with_gains([entry(D.WITHIN, 1.6, 0.5, hi=8), entry(D.OUTSIDE, 2.0, 1.5)])  # gain 0.4/1.5
    assert D.far_metrics(seed0) == {"copy_gain_within": pytest.approx(2 / 3), "copies_learnt": 1}
    assert D.far_metrics(seed1)["copies_learnt"] == 0
    both = D.combine([seed0, seed1])  # the mean loss over seeds (1.3), then its gain
    assert both[0]["gain"] == pytest.approx((2.0 - 1.3) / 1.5) and both[0]["gain_by_seed"] == [seed0[0]["gain"], seed1[0]["gain"]]
    assert D.with_gains([entry(D.WITHIN, 1.0, 2.5, hi=8), entry(D.OUTSIDE, 2.0, 1.5)])[0]["gain"] is None  # bound above ref


def test_window_losses_read_each_window_alone():
    import torch

    class Uniform(torch.nn.Module):  # uniform logits: every token costs log V
        def forward(self, x):
            return torch.zeros(*x.shape, 7)

    out = D.window_losses(Uniform(), np.arange(20) % 7, 5, 4, 3, "cpu")
    assert out.shape == (4, 4) and np.allclose(out, math.log(7))


COPY = {"kind": "synthetic-copy", "size": 20000, "synthetic": {"vocab": 32, "max_distance": 64, "distance": "log-uniform"}}


def test_a_tiny_run_reports_perplexity_by_distance_beside_the_bound(tmp_path):
    settings = dict(TINY, corpus=COPY, by_distance=True, modes=["nonoverlapping"], interpolate=False, eval_tokens=640)
    settings["L_valid_factors"] = [1, 4]
    task, case = make_case("extrapolation", "alibi", {"L_train": 16}, settings, tmp_path)
    out = task.run(case)
    entries = out["series"]["by_distance"]
    assert {e["L_valid"] for e in entries} == {16, 64}
    at64 = {e["bucket"]: e for e in entries if e["L_valid"] == 64}
    assert list(at64) == ["1-8", "9-16", "17-32", "33-64", D.WITHIN, D.BEYOND, D.NO_COPY, D.OUTSIDE]
    assert sum(at64[b]["tokens"] for b in ("1-8", "9-16", "17-32", "33-64", D.NO_COPY, D.OUTSIDE)) == 10 * 63
    assert at64[D.BEYOND]["tokens"] == at64["17-32"]["tokens"] + at64["33-64"]["tokens"]
    assert out["metrics"]["ppl_far@64"] == at64[D.BEYOND]["ppl"] and "ppl_far@16" not in out["metrics"]
    with pytest.raises(ValueError, match="by_distance needs a synthetic-copy corpus"):
        task.run(make_case("extrapolation", "alibi", {"L_train": 16}, dict(settings, corpus=TINY["corpus"]), tmp_path / "b")[1])

    rows = [base_row("t", "extrapolation", m, {"L_train": 16}, "r", series={"by_distance": entries}) for m in ("alibi", "rotary")]
    runs = load_runs(write_run(tmp_path / "results", rows), find_task=find_task)
    tables = distance_tables(runs)
    assert [t.extra["L_valid"] for t in tables] == [16, 64]
    t = tables[1]
    assert t.rows == ["alibi", "rotary", BOUND_ROW] and t.columns == list(at64)
    assert t.cell(BOUND_ROW, D.BEYOND).value == pytest.approx(at64[D.BEYOND]["bound_ppl"])
    assert t.cell("alibi", "33-64").text.endswith(f"({at64['33-64']['tokens']})")
    fig = distance_chart(t)
    lines = {ln.get_gid(): ln for ln in fig.axes[0].lines}
    assert list(lines[f"method:{BOUND_ROW}"].get_xdata()) == [8, 16, 32, 64] and "L_train" in lines


def test_the_copy_gain_table_compares_beyond_L_train_only_methods_that_learnt_to_copy(tmp_path):
    from posbench.report.learn_first import BROKEN, NOT_LEARNT

    def entries(within, far):  # gains at L_valid 16 (= L_train) within it, at 64 beyond it
        out = [
            {"L_valid": 16, "bucket": D.WITHIN, "lo": 1, "hi": 16, "tokens": 9, "ppl": 2.0, "bound_ppl": 1.5, "gain": within},
            {"L_valid": 64, "bucket": D.WITHIN, "lo": 1, "hi": 16, "tokens": 9, "ppl": 2.0, "bound_ppl": 1.5, "gain": 0.9},
            {"L_valid": 64, "bucket": D.BEYOND, "lo": 17, "hi": 63, "tokens": 9, "ppl": 3.0, "bound_ppl": 1.5, "gain": far},
        ]
        return {"by_distance": out}

    gains = {"alibi": (0.8, 0.1), "rotary": (0.6, 0.3), "nope": (0.2, 0.4)}
    rows = [base_row("t", "extrapolation", m, {"L_train": 16}, "r", series=entries(*g)) for m, g in gains.items()]
    (t,) = copy_gain_tables(load_runs(write_run(tmp_path / "results", rows), find_task=find_task))
    assert t.columns == [16, 64] and t.rows == ["alibi", "rotary", "nope"] and BROKEN not in t.title
    assert [t.cell(m, 16).text for m in t.rows] == ["0.80", "0.60", "0.20"]
    assert t.cell("alibi", 64).value == pytest.approx(0.1) and t.cell("nope", 64).text == NOT_LEARNT  # 0.2 < 0.5
    assert "2 of 3 learnt the task at L_train (copy gain within L_train >= 50%)" in t.caption
    rows = [r for r in rows if r["method"] == "nope"] + [
        base_row("t", "extrapolation", "fox", {"L_train": 16}, "r", series=entries(0.1, 0))
    ]
    (t,) = copy_gain_tables(load_runs(write_run(tmp_path / "r2", rows), find_task=find_task))
    assert BROKEN in t.title  # nobody learnt to copy: nothing beyond L_train is compared


def _rising_loss_fixture():
    """Windows of 64 tokens (L_train 8) where the model's loss rises with position (1 + bin / 4 over
    16 bins of position) on every copy it does not use; the copies from before the window sit in
    every bin but mostly early, the far copies (d 20 > L_train) only late, and the model realises
    exactly half of the source's advantage (bound 0.2) on every far copy, at every position."""
    Lv, W = 64, 12
    position = np.arange(1, Lv)
    bins = (position - 1) * D.POSITION_BINS // (Lv - 1)
    base = 1.0 + bins / 4.0  # (Lv - 1,) the loss of a copy the model cannot use
    first_of_bin = np.r_[True, bins[1:] != bins[:-1]]
    last_of_bin = np.r_[bins[1:] != bins[:-1], True]
    outside = first_of_bin | ((bins < 6) & (position % 2 == 0) & ~last_of_bin)  # every bin, most early
    far = last_of_bin & (position >= 20)  # late only
    assert not (outside & far).any() and set(bins[far]) <= set(bins[outside])
    distance = np.zeros(W * Lv, dtype=np.int64)
    for w in range(W):
        distance[w * Lv + position[outside]] = position[outside] + 3  # a source before the window
        distance[w * Lv + position[far]] = 20
    loss = np.tile(base, (W, 1))  # (W, Lv - 1); non-copies cost the same, and enter no gain
    loss[:, far] = base[far] - 0.5 * (base[far] - 0.2)
    bound = np.full(W * Lv, 0.2)
    bound[0] = np.nan
    return loss, bound, distance, Lv


def test_the_matched_copy_gain_does_not_read_low_where_loss_rises_with_position():
    loss, bound, distance, Lv = _rising_loss_fixture()
    got = {e["bucket"]: e for e in D.summarize(loss, bound, distance, Lv, 8, Lv)}
    far = got[D.BEYOND]
    assert far["tokens"] > 0 and far["matched_tokens"] == far["tokens"]  # every far copy's bin holds outside copies
    assert far["gain_matched"] == pytest.approx(0.5)  # what the model realises, at every position
    assert far["gain"] < 0.35  # the old reference, early in the window, reads the same use of the copy as low
    out = got[D.OUTSIDE]
    assert far["gain"] == pytest.approx((out["loss"] - far["loss"]) / (out["loss"] - 0.2))  # unchanged formula
    metrics = D.far_metrics(list(got.values()))
    assert metrics[f"copy_gain_far_matched@{Lv}"] == pytest.approx(0.5) and metrics[f"copy_gain_far@{Lv}"] == far["gain"]
    # over seeds: the mean of the matched means, then its gain
    other = D.summarize(loss + 0.1, bound, distance, Lv, 8, Lv)
    both = {e["bucket"]: e for e in D.combine([list(got.values()), other])}
    m = both[D.BEYOND]
    assert m["matched_loss"] == pytest.approx(far["matched_loss"] + 0.05)
    assert m["gain_matched"] == pytest.approx((m["matched_ref"] - m["matched_loss"]) / (m["matched_ref"] - 0.2))
    assert len(m["gain_matched_by_seed"]) == 2


def test_the_copy_gain_table_shows_the_matched_gain_with_the_old_beside_it(tmp_path):
    loss, bound, distance, Lv = _rising_loss_fixture()
    within = {"L_valid": 8, "bucket": D.WITHIN, "lo": 1, "hi": 8, "tokens": 9, "ppl": 2.0, "bound_ppl": 1.5}
    at_train = [dict(within, gain=0.4, gain_matched=0.8, matched_tokens=9)]  # learnt by the matched gate only
    entries = at_train + D.summarize(loss, bound, distance, Lv, 8, Lv)
    rows = [base_row("t", "extrapolation", "alibi", {"L_train": 8}, "r", series={"by_distance": entries})]
    (t,) = copy_gain_tables(load_runs(write_run(tmp_path / "results", rows), find_task=find_task))
    far = next(e for e in entries if e["bucket"] == D.BEYOND and e["L_valid"] == Lv)
    assert t.cell("alibi", 8).text == "0.80 (0.40)"
    assert t.cell("alibi", Lv).value == pytest.approx(0.5) and t.cell("alibi", Lv).text == f"0.50 ({far['gain']:.2f})"
    assert "at the same window positions as the copies scored" in t.caption


def test_the_copy_gain_table_shows_each_gains_interval_over_seeds_and_ranks_by_it(tmp_path):
    from posbench.report.headline import table_line

    def row(method, far, lo, hi):  # a 3-seed row: the matched gain beyond L_train 16 at 64, its t interval
        entries = [
            {"L_valid": 16, "bucket": D.WITHIN, "lo": 1, "hi": 16, "tokens": 9, "ppl": 2.0, "bound_ppl": 1.5, "gain": 0.8},
            {"L_valid": 64, "bucket": D.BEYOND, "lo": 17, "hi": 63, "tokens": 9, "ppl": 3.0, "bound_ppl": 1.5}
            | {"gain": far - 0.1, "gain_matched": far, "matched_tokens": 9},
        ]
        metrics = {"copy_gain_far_matched@64": far}
        if lo is not None:
            metrics |= {"copy_gain_far_matched@64_seed_lo": lo, "copy_gain_far_matched@64_seed_hi": hi}
            metrics |= {"copy_gain_within_seed_lo": 0.7, "copy_gain_within_seed_hi": 0.9}
        return base_row("t", "extrapolation", method, {"L_train": 16}, "r", series={"by_distance": entries}, metrics=metrics)

    apart = [row("alibi", 0.6, 0.5, 0.7), row("rotary", 0.2, 0.1, 0.3)]
    (t,) = copy_gain_tables(load_runs(write_run(tmp_path / "a", apart), find_task=find_task))
    assert t.cell("alibi", 64).text == "0.60 [0.50, 0.70] (0.50)" and t.cell("alibi", 64).spread == (0.5, 0.7)
    assert t.cell("rotary", 16).text == "0.80 [0.70, 0.90]"  # the unmatched gate's own interval
    assert "95% t interval over the training seeds" in t.caption
    assert table_line(t).text.endswith("Best: alibi.")
    close = [row("alibi", 0.6, 0.3, 0.9), row("rotary", 0.2, 0.1, 0.4)]
    (t,) = copy_gain_tables(load_runs(write_run(tmp_path / "c", close), find_task=find_task))
    assert table_line(t).text.endswith("Not separable: alibi, rotary.")
    one_seed = [row("alibi", 0.6, None, None)]
    (t,) = copy_gain_tables(load_runs(write_run(tmp_path / "o", one_seed), find_task=find_task))
    assert t.cell("alibi", 64).text == "0.60 (0.50)" and "t interval" not in t.caption
