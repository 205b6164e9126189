"""Seeds as an axis (issue 39): per-seed results combined into one row with the mean, the sample
std and the 95% t interval over seeds, checked against hand-computed numbers; learn first per
seed; the tables' seed intervals; compare reading the seed-level spread."""

import math
from types import SimpleNamespace

import pytest

from posbench.protocols.seeds import checkpoint_name, combine_accuracy_seeds, combine_metrics
from posbench.report.cells import spread_of
from posbench.report.compare_cases import compare_case
from posbench.report.learn_first import comparability, learned_over_seeds
from posbench.report.stats import SEED_INTERVAL, seed_accuracies, seed_interval, t975
from posbench.report.table import SPREAD_SEED_CI
from posbench.tasks import get as get_task
from posbench.tasks.extrapolation.ppl_tables import _ppl_cell
from posbench.tasks.lengthgen import report as T
from posbench.tasks.retrieval.accuracy import accuracy_table
from posbench.tasks.retrieval.report import markdown_table
from tests.helpers.cases import LENGTHGEN_TINY as LG_TINY  # the tasks' own tiny settings; seeds added here
from tests.helpers.cases import RETRIEVAL_TINY as RE_TINY

# Three seeds of perplexity 10, 12, 14: mean 12, sample std 2, t(2) = 4.303, half-width
# 4.303 * 2 / sqrt(3) = 4.9687.
HALF = 4.303 * 2 / math.sqrt(3)


def test_seed_interval_by_hand():
    mean, std, n, lo, hi = seed_interval([10.0, 12.0, 14.0])
    assert (mean, std, n) == (12.0, 2.0, 3)
    assert (lo, hi) == pytest.approx((12 - HALF, 12 + HALF)) and lo == pytest.approx(7.0313, abs=1e-4)
    assert seed_interval([5.0, None, float("nan")])[2:] == (1, None, None)  # one finite value: no interval
    assert t975(4) == 2.776 and t975(40) == pytest.approx(2.021, abs=1e-3)  # the table's 2.021
    with pytest.raises(ValueError, match="at least 1 degree"):
        t975(0)


def test_combine_metrics_by_hand():
    per_seed = [{"ppl": 10.0, "best": None, "steps": 100}, {"ppl": 12.0, "best": 3.0, "steps": 100}, {"ppl": 14.0, "steps": 100}]
    metrics, series = combine_metrics(per_seed)
    assert metrics["n_seeds"] == 3 and metrics["ppl"] == 12.0 and metrics["ppl_std"] == 2.0
    assert (metrics["ppl_seed_lo"], metrics["ppl_seed_hi"]) == pytest.approx((12 - HALF, 12 + HALF))
    assert metrics["best"] == 3.0 and metrics["best_seed_lo"] is None  # one seed has it
    assert series["best_by_seed"] == [None, 3.0, None] and series["ppl_by_seed"] == [10.0, 12.0, 14.0]
    assert metrics["steps_std"] == 0.0 and metrics["steps_seed_lo"] == metrics["steps_seed_hi"] == 100.0
    assert checkpoint_name("a/L=8", 2, [0, 2]) == "a/L=8@seed2" and checkpoint_name("a", 0, [0]) == "a"


def test_learn_first_per_seed():
    assert learned_over_seeds([True, True, True]) is True
    assert learned_over_seeds([True, False, None]) is False
    assert learned_over_seeds([True, None]) is None
    per_seed = [
        {"acc_at_train_len": 0.95, "acc@8": 0.95, "effective_length": 16},
        {"acc_at_train_len": 0.70, "acc@8": 0.70, "effective_length": None},
        {"acc_at_train_len": 0.99, "acc@8": 0.99, "effective_length": 32},
    ]
    pooled = {"acc@8": 0.88, "acc_lo@8": 0.8, "acc_hi@8": 0.93, "acc_at_train_len": 0.88}
    metrics, _ = combine_accuracy_seeds(per_seed, pooled, learned_threshold=0.9)
    assert metrics["seeds_learnt"] == 2 and metrics["n_seeds"] == 3 and metrics["learned"] == 0
    assert metrics["effective_length"] is None  # not every seed learnt: no length is compared
    assert (metrics["acc_lo@8"], metrics["acc_hi@8"]) == (0.8, 0.93)  # Wilson over the pooled samples
    # 0.95, 0.70, 0.99: mean 0.88, squared deviations 0.0049 + 0.0324 + 0.0121 = 0.0494, std sqrt(0.0247)
    assert metrics["acc@8_seed_lo"] == pytest.approx(0.88 - 4.303 * math.sqrt(0.0247) / math.sqrt(3))
    note = comparability({"alibi": False, "rotary": True}, 0.9, {"alibi": (2, 3), "rotary": (3, 3)}).note()
    assert "seeds learnt: alibi 2 of 3, rotary 3 of 3" in note and "1 of 2 learnt" in note


def _lg_cells(seed, correct_at):
    return [{"n": n, "correct": k, "total": 10, "status": "ok", "seed": seed} for n, k in correct_at]


def test_lengthgen_table_shows_the_seed_interval_and_seeds_learnt():
    # seeds 0, 1, 2 at n = 4 (L_train): 9, 10, 8 of 10 -> 0.9, 1.0, 0.8: mean 0.9, std 0.1,
    # t interval 0.9 ± 4.303 * 0.1 / sqrt(3) = [0.652, 1.148], shown clipped to [65, 100]
    def row(method, cells):
        return {
            "task": "lengthgen",
            "status": "ok",
            "method": method,
            "params": {"L_train": 4, "task": "reverse"},
            "series": {"cells": cells, "learned_threshold": 0.9, "source": "s"},
            "case_id": f"c-{method}",
            "run_id": "r",
            "hardware": "cpu",
        }

    cells = _lg_cells(0, [(4, 9), (8, 2)]) + _lg_cells(1, [(4, 10), (8, 4)]) + _lg_cells(2, [(4, 8), (8, 3)])
    learnt = _lg_cells(0, [(4, 10), (8, 2)]) + _lg_cells(1, [(4, 10), (8, 4)]) + _lg_cells(2, [(4, 10), (8, 3)])
    assert seed_accuracies(cells, "n")[4] == {0: 0.9, 1: 1.0, 2: 0.8}
    (table,) = T.accuracy_tables([row("rotary", cells), row("alibi", learnt)])
    assert table.cell("rotary", 4).text.startswith("90% [") and table.cell("rotary", 4).text.endswith(" seeds [65, 100]")
    # n = 8: 0.2, 0.4, 0.3 -> mean 0.3, std 0.1, 0.3 ± 0.248: [5, 55]
    assert table.cell("rotary", 8).text.endswith(" seeds [5, 55]")
    assert table.cell("rotary", T.LEARNT).text == "no" and table.cell("rotary", T.BEYOND).text == T.NOT_LEARNT
    assert table.cell("alibi", T.LEARNT).text == "yes"  # every seed at 100%
    assert table.cell("alibi", T.BEYOND).text == table.cell("alibi", 8).text  # the one length beyond L_train
    assert table.cell("alibi", 8).text.endswith(" seeds [5, 55]")
    assert "seeds learnt: rotary 2 of 3, alibi 3 of 3" in table.caption and SEED_INTERVAL in table.caption


def test_retrieval_table_shows_the_seed_interval():
    def row(seed_acc):
        cells = [
            {"L_valid": Lv, "depth": 0.5, "correct": k, "total": 10, "status": "ok", "seed": seed}
            for seed, per in seed_acc.items()
            for Lv, k in per.items()
        ]
        return {
            "task": "retrieval",
            "status": "ok",
            "method": "alibi",
            "params": {"L_train": 8, "probe": "passkey"},
            "series": {"cells": cells, "learned_threshold": 0.9},
            "case_id": "c",
            "run_id": "r",
        }

    rows = [row({0: {8: 10, 16: 4}, 1: {8: 10, 16: 6}})]
    (t8, t16) = accuracy_table(rows)
    assert t8["learned"] is True and t8["seeds_learnt"] == (2, 2) and t16["n_seeds"] == 2
    # 0.4, 0.6: mean 0.5, std 0.1414, t(1) = 12.706: 0.5 ± 1.2706 -> clipped [0, 100]
    assert (t16["seed_lo"], t16["seed_hi"]) == pytest.approx((0.5 - 12.706 * 0.1, 0.5 + 12.706 * 0.1))
    text = markdown_table(rows, "passkey")
    assert "50% [" in text and "seeds [0, 100]" in text and "seeds learnt: alibi, L_train=8 2 of 2" in text


def test_perplexity_cell_and_metric_tables_use_the_seed_interval():
    row = SimpleNamespace(case_id="c", run_id="r", status="ok", message="")
    cell = _ppl_cell(row, {"ppl": 12.0, "ppl_std": 2.0, "ppl_seed_lo": 7.03, "ppl_seed_hi": 16.97, "status": "ok"})
    assert cell.spread == (7.03, 16.97) and cell.text == "12.00 [7.03, 16.97]"
    table = SimpleNamespace(spread="")
    assert spread_of(
        {"acc_beyond": 0.3, "acc_beyond_std": 0.1, "acc_beyond_seed_lo": 0.05, "acc_beyond_seed_hi": 0.55},
        "acc_beyond",
        0.3,
        table,
    ) == (0.05, 0.55)
    assert table.spread == SPREAD_SEED_CI == SEED_INTERVAL


def test_compare_reads_the_seed_level_spread():
    tasks = {"extrapolation": get_task("extrapolation")}

    def row(values):
        return SimpleNamespace(
            status="ok",
            method="alibi",
            task="extrapolation",
            metrics={"ppl_at_train_len": sum(values) / 3},
            series={"ppl_at_train_len_by_seed": values},
        )

    # a 10% change whose seeds overlap: noise, not a regression
    (change,) = compare_case("c", row([10.0, 12.0, 14.0]), row([11.0, 13.2, 15.4]), 0.05, tasks=tasks)
    assert change.verdict == "noise" and change.interval is not None
    # every seed far worse: a regression
    (change,) = compare_case("c", row([10.0, 10.1, 10.2]), row([20.0, 20.1, 20.2]), 0.05, tasks=tasks)
    assert change.verdict == "regression"


def test_seeded_lengthgen_and_retrieval_cases_train_one_model_per_seed(tmp_path):
    from tests.helpers.cases import make_case

    task, case = make_case("lengthgen", "rotary", {"L_train": 3, "task": "reverse"}, {**LG_TINY, "seeds": [0, 1]}, tmp_path)
    out = task.run(case)
    m, s = out["metrics"], out["series"]
    assert m["n_seeds"] == 2 and 0 <= m["seeds_learnt"] <= 2 and len(s["final_train_loss_by_seed"]) == 2
    assert s["final_train_loss_by_seed"][0] != s["final_train_loss_by_seed"][1]  # two models
    assert sorted({c["seed"] for c in s["cells"]}) == [0, 1] and len(s["cells"]) == 4
    assert m["acc@3"] == pytest.approx(sum(s["acc@3_by_seed"]) / 2)
    task, case = make_case("retrieval", "alibi", {"L_train": 16, "probe": "passkey"}, {**RE_TINY, "seeds": [3, 4]}, tmp_path)
    out = task.run(case)
    assert out["metrics"]["n_seeds"] == 2 and "acc@16_seed_lo" in out["metrics"]
    assert sorted({c["seed"] for c in out["series"]["cells"]}) == [3, 4]
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("retrieval__alibi*")) == [
        "retrieval__alibi__L_train=16@seed3.pt",
        "retrieval__alibi__L_train=16@seed4.pt",
    ]
    with pytest.raises(ValueError, match="seeds must be distinct"):
        make_case("lengthgen", "rotary", {"L_train": 3, "task": "reverse"}, {**LG_TINY, "seeds": [1, 1]}, tmp_path)
