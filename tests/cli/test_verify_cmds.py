"""``bench.py verify`` refuses to pass a claim read from a model that did not learn at L_train
(posbench/cli/verify_cmds.py: ``learn_first_refusals``; issue 66)."""

from __future__ import annotations

import textwrap

from posbench.cli import app as cli
from tests.helpers.report_rows import base_row, write_run

ORDERING = """\
    format: 1
    version: 1
    references:
    - id: alibi-beats-sinusoidal
      source: "test"
      check: ordering
      suite: extrapolation
      metric: ppl_at_max_len
      better: alibi
      worse: sinusoidal
    """


def undertrained_run(root, sinusoidal_at_train: float, bound: float = 7.65):
    """Issue 66's 120-step run: at L_train sinusoidal ``sinusoidal_at_train``, alibi 14.1, against
    the source's bound ``bound``; beyond it alibi 15, sinusoidal 300 (the claim's order holds)."""
    rows = []
    for method, at_train, at_max in (("sinusoidal", sinusoidal_at_train, 300.0), ("alibi", 14.1, 15.0)):
        row = base_row("extrapolation", "extrapolation", method, {"L_train": 64}, "run-u")
        row["metrics"] = {"ppl_at_train_len": at_train, "ppl_at_max_len": at_max, "best_ppl_eval": bound, "best_ppl": 7.0}
        rows.append(row)
    return write_run(root, rows)


def verify(tmp_path, capsys, run) -> tuple[int, list[str]]:
    refs = tmp_path / "refs.yaml"
    refs.write_text(textwrap.dedent(ORDERING))
    code = cli.main(["verify", "--references", str(refs), str(run)])
    return code, capsys.readouterr().out.splitlines()


def test_an_undertrained_extrapolation_run_fails_verify(tmp_path, capsys):
    run = undertrained_run(tmp_path, sinusoidal_at_train=23.1)  # 23.1 > 1.5 x alibi's 14.1
    code, lines = verify(tmp_path, capsys, run)
    assert code == 1
    assert lines[0].startswith("fail     alibi-beats-sinusoidal  not learnt at L_train: sinusoidal at {'L_train': 64}")
    assert "perplexity 23.1 at L_train (best 14.1, bound 7.65)" in lines[0]
    assert "so no claim beyond it is read" in lines[0]


def test_the_same_claim_passes_when_both_learnt(tmp_path, capsys):
    run = undertrained_run(tmp_path, sinusoidal_at_train=14.5)  # within 1.5x the best and 2x the bound
    code, lines = verify(tmp_path, capsys, run)
    assert code == 0 and lines[0].startswith("pass     alibi-beats-sinusoidal")


def test_far_from_the_bound_alone_fails_too(tmp_path, capsys):
    # both close to each other, both more than 2x the source's bound: neither learnt
    run = undertrained_run(tmp_path, sinusoidal_at_train=14.5, bound=5.0)
    code, lines = verify(tmp_path, capsys, run)
    assert code == 1 and "alibi at {'L_train': 64}" in lines[0] and "bound 5" in lines[0]
