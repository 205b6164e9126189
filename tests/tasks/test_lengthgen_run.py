"""The lengthgen task: a tiny case end to end, the teacher-forced exact match against greedy
decoding through the KV cache, the answer-only loss, the learnt flag, the table layout with the
learn-first marking, and the suite's profiles."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posbench.core.model import build_model, model_config
from posbench.data import algorithmic as A
from posbench.protocols.probing.scoring import greedy_answers
from posbench.report.learn_first import BROKEN, NOT_LEARNT
from posbench.report.stats import wilson_interval
from posbench.run import suite as suitemod
from posbench.tasks import find as find_task
from posbench.tasks.lengthgen import answers as TE
from posbench.tasks.lengthgen import report as T
from posbench.tasks.lengthgen import run as LG
from tests.helpers.cases import LENGTHGEN_TINY, make_case

TINY = LENGTHGEN_TINY


def test_tiny_case_end_to_end(tmp_path):
    task, case = make_case("lengthgen", "randomized", {"L_train": 3, "task": "reverse"}, TINY, tmp_path)
    out = task.run(case)
    cells, m = out["series"]["cells"], out["metrics"]
    assert [(c["n"], c["total"], c["status"]) for c in cells] == [(3, 6, "ok"), (6, 6, "ok")]
    k = cells[1]["correct"]
    assert m["acc@6"] == m["acc_at_max_len"] == m["acc_beyond"] == k / 6
    assert (m["acc_lo@6"], m["acc_hi@6"]) == wilson_interval(k, 6)
    assert cells[1]["token_total"] == 6 * 6 and k * 6 <= cells[1]["token_correct"] <= 36
    assert m["token_acc_beyond"] == cells[1]["token_correct"] / 36
    assert m["learned"] == int(m["acc@3"] >= 0.9) and m["chance_at_train_len"] == 2.0**-3
    assert m["train_steps"] == 3 and m["train_examples"] == 12 and np.isfinite(m["final_train_loss"])
    assert out["series"]["learned_threshold"] == 0.9 and out["series"]["source"] == "Ruoss et al. 2023"


def _model(method="rotary", vocab=4, seed=0):
    torch.manual_seed(seed)
    cfg = model_config("tiny", method, vocab_size=vocab, n_layers=2, d_model=32, n_heads=2, d_ff=64)
    return build_model(cfg).eval()


def _decode(model, tokens: torch.Tensor, answer: slice) -> torch.Tensor:
    (decoded,) = greedy_answers(model, tokens, [(answer.start, answer.stop)])  # through the KV cache
    return decoded


@pytest.mark.parametrize("method", ["rotary", "alibi", "randomized"])
def test_exact_match_equals_greedy_decoding(method):
    # Answers planted from the model's own greedy decoding: every third row wholly right, every
    # third right up to its last token (a miss the one teacher-forced forward must see too), the
    # rest as drawn. The verdicts must equal greedy decoding's through the KV cache.
    for seed in range(3):
        model = _model(method, seed=seed)
        batch = A.generate("reverse", 3, 30, seed)
        tokens = torch.from_numpy(batch.tokens.copy())
        decoded = _decode(model, tokens, batch.answer)
        tokens[0::3, batch.answer] = decoded[0::3]
        tokens[1::3, batch.answer] = decoded[1::3]
        tokens[1::3, batch.answer.stop - 1] = (decoded[1::3, -1] + 1) % 4
        planted = A.Batch(tokens.numpy(), batch.answer)
        fast = TE.exact_match(model, planted, "cpu", 7)
        slow = (_decode(model, tokens, batch.answer) == tokens[:, batch.answer]).all(dim=1).numpy()
        assert np.array_equal(fast, slow)
        assert fast[0::3].all() and not fast[1::3].any()


def test_loss_is_on_the_answer_only():
    batch = A.generate("duplicate", 3, 2, 0)
    ids, targets = TE._with_targets(batch)
    assert ids.shape == (2, 11) and targets.shape == (2, 10)
    assert (targets[:, :4] == TE.IGNORE).all()  # BOS x1 x2 x3 predict x1 x2 x3 SEP: no loss
    assert torch.equal(targets[:, 4:], ids[:, 5:])  # SEP and the answer predict the answer's 6 tokens
    model = _model(vocab=4)
    logits = model(ids[:, :-1])
    full = torch.nn.functional.cross_entropy(logits.reshape(-1, 4), targets.reshape(-1))
    answer_only = torch.nn.functional.cross_entropy(logits[:, 4:].reshape(-1, 4), ids[:, 5:].reshape(-1))
    assert torch.allclose(full, answer_only)


def _cells(*triples):
    return [{"n": n, "correct": k, "total": t, "status": "ok", "message": ""} for n, k, t in triples]


def test_summarize_and_the_learnt_flag():
    m = LG.summarize(_cells((4, 19, 20), (8, 5, 10), (16, 1, 10)), 4, 0.9)
    assert m["acc_at_train_len"] == 0.95 and m["learned"] == 1
    assert m["acc_beyond"] == 6 / 20 and m["acc_at_max_len"] == 0.1
    assert LG.summarize(_cells((4, 17, 20), (8, 5, 10)), 4, 0.9)["learned"] == 0
    failed = [{"n": 4, "correct": 0, "total": 0, "status": "oom", "message": "MemoryError"}]
    assert LG.summarize(failed, 4, 0.9)["learned"] is None  # no accuracy: unknown, not "not learnt"


def _row(method, cells, task="reverse", L=4):
    return {
        "task": "lengthgen",
        "status": "ok",
        "method": method,
        "params": {"L_train": L, "task": task},
        "series": {"cells": cells, "learned_threshold": 0.9, "source": "Ruoss et al. 2023"},
        "case_id": f"c-{method}",
        "run_id": "r",
        "hardware": "cpu",
    }


def test_table_layout_marks_methods_that_did_not_learn():
    rows = [
        _row("randomized", _cells((4, 20, 20), (8, 12, 20), (16, 2, 20))),
        _row("rotary", _cells((4, 19, 20), (8, 3, 20), (16, 0, 20))),
        _row("nope", _cells((4, 4, 20), (8, 1, 20), (16, 0, 20))),
    ]
    (table,) = T.accuracy_tables(rows)
    assert table.columns == [4, 8, 16, T.BEYOND, T.LEARNT] and table.rows == ["randomized", "rotary", "nope"]
    lo, hi = wilson_interval(12, 20)
    assert table.cell("randomized", 8).text == f"60% [{100 * lo:.0f}, {100 * hi:.0f}]"
    assert table.cell("randomized", T.BEYOND).value == 14 / 40
    assert table.cell("rotary", T.LEARNT).text == "yes" and table.cell("nope", T.LEARNT).text == "no"
    assert table.cell("nope", T.BEYOND).text == NOT_LEARNT and table.cell("nope", T.BEYOND).value is None
    assert table.cell("nope", 8).value == 0.05  # measured numbers stay visible, only the comparison is withheld
    assert "2 of 3 learnt the task at L_train" in table.caption and "nope" in table.caption
    assert BROKEN not in table.title
    (broken,) = T.accuracy_tables(rows[2:])
    assert BROKEN in broken.title


def test_settings_errors_are_one_line(tmp_path):
    with pytest.raises(ValueError, match="test_factors must include 1"):
        make_case("lengthgen", "rotary", {"L_train": 4, "task": "copy"}, {**TINY, "test_factors": [2, 4]}, tmp_path)
    with pytest.raises(ValueError, match="task"):
        make_case("lengthgen", "rotary", {"L_train": 4, "task": "revers"}, TINY, tmp_path)
    _, case = make_case(
        "lengthgen", "rotary", {"L_train": 10, "task": "copy"}, {**TINY, "test_factors": [0.5, 1, 1.5, 4]}, tmp_path
    )
    assert case.settings.test_lengths(10) == [5, 10, 15, 40]


def test_suite_profiles():
    loaded = suitemod.load("lengthgen")
    cpu = suitemod.resolve(loaded, "cpu")
    assert cpu.task_name == "lengthgen" and set(cpu.methods) >= {"rotary", "randomized"}
    assert set(cpu.grid["task"]) >= {"reverse", "duplicate"}
    (L,) = cpu.grid["L_train"]
    assert max(cpu.settings.test_lengths(L)) >= 4 * L and L in cpu.settings.test_lengths(L)
    gpu = suitemod.resolve(loaded, "gpu")
    assert {"reverse", "duplicate", "parity", "modular_arithmetic", "copy", "addition", "sort"} <= set(gpu.grid["task"])
    assert max(gpu.settings.test_lengths(max(gpu.grid["L_train"]))) >= 4 * max(gpu.grid["L_train"])


def test_report_and_run_summary_show_the_accuracy_tables(tmp_path):
    """`bench.py report` on a lengthgen run: the metric tables, then per algorithmic task the
    methods x n accuracy with Wilson intervals and the learn-first marking; the end-of-run
    summary prints the same per-task tables."""
    from posbench.report.build import build_report
    from posbench.report.rows import load_runs
    from posbench.report.tabulate import run_tables
    from tests.helpers.report_rows import base_row, write_run

    rows = []
    for method, cells in (("randomized", _cells((4, 20, 20), (8, 12, 20))), ("rotary", _cells((4, 10, 20), (8, 0, 20)))):
        row = base_row("lengthgen", "lengthgen", method, {"L_train": 4, "task": "reverse"}, "run-l")
        row["metrics"] = LG.summarize(cells, 4, 0.9)
        row["series"] = {"cells": cells, "learned_threshold": 0.9, "source": "Ruoss et al. 2023"}
        rows.append(row)
    folder = write_run(tmp_path / "runs", rows, baseline="rotary", metrics=["acc_at_train_len", "acc_beyond"])
    build_report([folder], tmp_path / "report", find_task=find_task)
    md = (tmp_path / "report" / "report.md").read_text()
    lo, hi = wilson_interval(12, 20)
    assert "### reverse" in md and f"60% [{100 * lo:.0f}, {100 * hi:.0f}]" in md
    assert NOT_LEARNT in md and BROKEN in md  # one of two learnt: nothing to compare
    (summary,) = run_tables(load_runs([folder], find_task=find_task))
    assert summary.columns == [4, 8, T.BEYOND, T.LEARNT]


def test_settings_name_every_generator_without_importing_numpy():
    from posbench.data.algorithmic import TASKS
    from posbench.tasks.lengthgen.task import TASK_NAMES

    assert TASK_NAMES == tuple(TASKS)
