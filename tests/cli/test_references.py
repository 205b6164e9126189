"""``bench.py verify``: the references file (posbench/references.yaml) checked against posbench's
code and against run folders (posbench/cli/references.py, posbench/cli/verify_cmds.py)."""

from __future__ import annotations

import os
import re
import textwrap
import threading

import pytest

from posbench.cli import app as cli
from posbench.cli import references as refs
from tests.helpers.report_rows import base_row, write_run


def verify(capsys, *argv) -> tuple[int, list[str], str]:
    code = cli.main(["verify", *map(str, argv)])
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err


def line_of(lines: list[str], ref_id: str) -> str:
    found = [line for line in lines if line.split()[1:2] == [ref_id]]
    assert len(found) == 1, lines
    return found[0]


def ppl_run(root, alibi=20.0, sinusoidal=80.0, rotary=40.0, t5=30.0, l_trains=(64,), run_id="run-x"):
    """An extrapolation run folder: ppl_at_max_len per method at each L_train."""
    values = {"alibi": alibi, "sinusoidal": sinusoidal, "rotary": rotary, "t5_bias": t5}
    rows = []
    for L in l_trains:
        for method, ppl in values.items():
            row = base_row("extrapolation", "extrapolation", method, {"L_train": L}, run_id)
            row["metrics"] = {"ppl_at_max_len": ppl, "ppl_at_train_len": 10.0}
            rows.append(row)
    return write_run(root, rows)


def references_file(tmp_path, body: str, name="refs.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


ORDERING = """\
    format: 1
    version: 3
    references:
    - id: alibi-first
      source: "test"
      check: ordering
      suite: extrapolation
      metric: ppl_at_max_len
      better: alibi
      worse: sinusoidal
    """


def test_shipped_file_checks_posbench_code_and_skips_what_needs_a_run(capsys):
    code, lines, err = verify(capsys)
    assert code == 0 and err == ""
    for ref_id in (
        "alibi-slopes-8-heads",
        "alibi-slopes-16-heads",
        "alibi-slopes-12-heads",
        "rope-hf-linear",
        "rope-hf-dynamic-ntk",
        "rope-hf-yarn",
        "rope-hf-llama3",
        "rope-hf-longrope",
    ):
        assert line_of(lines, ref_id).startswith("pass ")
    assert line_of(lines, "ruoss-randomized-beats-rotary-beyond-train-len").endswith("no run of suite lengthgen given")
    assert line_of(lines, "sambanova-float16-collapses").endswith("no run of suite precision given")
    version, entries = refs.load()
    assert lines[-1] == (
        f"8 passed, 0 failed, {len(entries) - 8} skipped ({len(entries)} references, version {version} of {refs.DEFAULT_FILE})"
    )


def test_shipped_orderings_pass_on_a_run_that_orders_as_the_paper(tmp_path, capsys):
    run = ppl_run(tmp_path, l_trains=(64, 128))
    code, lines, _ = verify(capsys, run)
    assert code == 0
    assert line_of(lines, "alibi-beats-sinusoidal-beyond-train-len").endswith(
        f"alibi beats sinusoidal at 2 grid point(s) (ppl_at_max_len, lower is better; e.g. 20 vs 80 at L_train=64 in {run})"
    )
    assert line_of(lines, "t5-bias-beats-rotary-beyond-train-len").startswith("pass ")


def test_a_doctored_run_fails_with_the_grid_point_and_exit_1(tmp_path, capsys):
    run = ppl_run(tmp_path, t5=50.0)  # t5_bias worse than rotary, as at the cpu profile
    code, lines, _ = verify(capsys, run)
    assert code == 1
    assert line_of(lines, "t5-bias-beats-rotary-beyond-train-len") == (
        f"fail     t5-bias-beats-rotary-beyond-train-len           at L_train=64 in {run}: t5_bias 50, rotary 40 "
        "(ppl_at_max_len, lower is better)"
    )
    assert line_of(lines, "alibi-beats-t5-bias-beyond-train-len").startswith("pass ")  # the others still checked
    assert " 1 failed, " in lines[-1]


def test_ordering_rule_mean_and_every(tmp_path, capsys):
    run = ppl_run(tmp_path / "a", l_trains=(64,), alibi=100.0)
    ppl_run(tmp_path / "b", l_trains=(64,), alibi=10.0, sinusoidal=80.0, run_id="run-y")
    path = references_file(tmp_path, ORDERING)
    code, lines, _ = verify(capsys, "--references", path, run, tmp_path / "b")
    assert code == 1 and line_of(lines, "alibi-first").startswith(f"fail     alibi-first  at L_train=64 in {run}: alibi 100")
    path.write_text(path.read_text() + "  rule: mean\n")
    code, lines, _ = verify(capsys, "--references", path, run, tmp_path / "b")
    assert code == 0 and line_of(lines, "alibi-first") == (
        "pass     alibi-first  mean ppl_at_max_len over 2 grid point(s): alibi 55, sinusoidal 80 (lower is better)"
    )


@pytest.mark.parametrize(
    "extra, why",
    [
        ("  params: {L_train: 4096}\n", "no ok row of suite extrapolation matches params {'L_train': 4096} settings {}"),
        ("", "rows of suite extrapolation have no metric acc_beyond_train"),
    ],
)
def test_skipped_entries_say_why(tmp_path, capsys, extra, why):
    run = ppl_run(tmp_path)
    body = ORDERING.replace("ppl_at_max_len", "acc_beyond_train" if not extra else "ppl_at_max_len")
    path = references_file(tmp_path, body)
    path.write_text(path.read_text() + extra)
    code, lines, _ = verify(capsys, "--references", path, run)
    assert code == 0 and line_of(lines, "alibi-first") == f"skipped  alibi-first  {why}"


def test_an_ordering_without_both_methods_or_a_direction_is_skipped(tmp_path, capsys):
    run = ppl_run(tmp_path)
    path = references_file(tmp_path, ORDERING.replace("worse: sinusoidal", "worse: fire"))
    assert verify(capsys, "--references", path, run)[1][0].endswith(
        "no grid point of suite extrapolation has both alibi and fire with metric ppl_at_max_len"
    )
    path = references_file(tmp_path, ORDERING.replace("ppl_at_max_len", "train_steps"))
    rows = [
        dict(base_row("extrapolation", "extrapolation", m, {"L_train": 64}, "run-z"), metrics={"train_steps": 5})
        for m in ("alibi", "sinusoidal")
    ]
    run = write_run(tmp_path / "z", rows)
    assert verify(capsys, "--references", path, run)[1][0].endswith(
        "task extrapolation declares no direction for metric train_steps"
    )


VALUE = """\
    format: 1
    version: 1
    references:
    - id: f16
      source: "SambaNova 2023"
      check: value
      suite: precision
      params: {study: bias_counts}
      settings: {analysis_length: 8192}
      metric: last_window_distinct@float16
      min: 30
      max: 49
    """


@pytest.mark.parametrize("value, status", [(41, "pass"), (192, "fail")])
def test_a_value_reference_against_rows(tmp_path, capsys, value, status):
    row = base_row(
        "precision", "precision", "alibi", {"study": "bias_counts", "L_train": 64}, "run-p", settings={"analysis_length": 8192}
    )
    row["metrics"] = {"last_window_distinct@float16": value}
    run = write_run(tmp_path, [row])
    code, lines, _ = verify(capsys, "--references", references_file(tmp_path, VALUE), run)
    assert (code, lines[0].split()[0]) == ({"pass": 0, "fail": 1}[status], status)
    if status == "fail":
        assert lines[0].endswith(
            f"alibi at L_train=64, study=bias_counts in {run}: last_window_distinct@float16 192, published in [30, 49]"
        )


STATIC = """\
    format: 1
    version: 1
    references:
    - id: slopes
      source: "doctored"
      check: alibi_slopes
      heads: 2
      slopes: [0.0625, 0.0039]
    - id: yarn
      source: "doctored"
      check: rope
      method: rotary_yarn
      options: {factor: 4.0, train_len: 512}
      head_dim: 64
      length: 512
      inv_freq: {4: 0.2797}
      attention_factor: 1.1386294361
    - id: unknown-method
      source: "doctored"
      check: rope
      method: rotary_nope
      head_dim: 8
      length: 8
      inv_freq: {0: 1.0}
      attention_factor: 1.0
    """


def test_doctored_static_references_fail_each_on_its_own_line(tmp_path, capsys):
    code, lines, _ = verify(capsys, "--references", references_file(tmp_path, STATIC))
    assert code == 1
    assert lines[0] == "fail     slopes          head 1: posbench 0.00390625, published 0.0039 (1 of 2 heads differ)"
    assert lines[1] == ("fail     yarn            pair 4: posbench 0.297983856, published 0.2797 (relative tolerance 1e-06)")
    assert lines[2].startswith("fail     unknown-method  cannot build rotary_nope: unknown method 'rotary_nope'")
    assert lines[3].startswith("0 passed, 3 failed, 0 skipped (3 references, version 1 of ")


@pytest.mark.parametrize(
    "body, message",
    [
        ("format: 1\nversion: 1\nreferences: [\n", r"not a readable YAML file \(line 4\): "),
        ("- 1\n", r"the root must be a mapping with exactly format, version, references; got list"),
        ("format: 2\nversion: 1\nreferences: []\n", r"format 2 is not one this posbench reads; allowed: 1"),
        ("format: 1\nversion: 0\nreferences: [x]\n", r"version must be a positive integer, got 0"),
        ("format: 1\nversion: 1\nreferences: []\n", r"references must be a non-empty list of entries"),
        (
            "format: 1\nversion: 1\nreferences: [{id: a, source: s, check: guess}]\n",
            r"entry 1 \(a\): check 'guess' is not one of alibi_slopes, rope, value, ordering",
        ),
        (
            "format: 1\nversion: 1\nreferences: [{id: a, source: s, check: alibi_slopes, heads: 2, slopes: [1, 2], x: 1}]\n",
            r"entry 1 \(a\): unknown key\(s\) x; allowed: check, heads, id, slopes, source",
        ),
        (
            "format: 1\nversion: 1\nreferences: [{id: a, check: alibi_slopes, heads: 2}]\n",
            r"entry 1 \(a\): missing slopes, source; allowed: ",
        ),
        (
            "format: 1\nversion: 1\nreferences: [{id: a, source: s, check: alibi_slopes, heads: 2, slopes: [1]}]\n",
            r"entry 1 \(a\): slopes must be a list of 2 numbers",
        ),
        (
            "format: 1\nversion: 1\nreferences:\n- {id: a, source: s, check: alibi_slopes, heads: 1, slopes: [1]}\n"
            "- {id: a, source: s, check: alibi_slopes, heads: 1, slopes: [1]}\n",
            r"entry 2 \(a\): duplicate id",
        ),
        (
            "format: 1\nversion: 1\nreferences: [{id: a, source: s, check: value, suite: x, metric: m}]\n",
            r"entry 1 \(a\): give a number as equals, or min and/or max",
        ),
        (
            "format: 1\nversion: 1\nreferences: [{id: a, source: s, check: ordering, suite: x, metric: m, better: a, "
            "worse: b, rule: most}]\n",
            r"entry 1 \(a\): rule must be one of every, mean, got 'most'",
        ),
    ],
)
def test_bad_references_file_is_one_line_and_exit_2(tmp_path, capsys, body, message):
    path = tmp_path / "refs.yaml"
    path.write_text(body)
    code, lines, err = verify(capsys, "--references", path)
    assert code == 2 and lines == []
    assert err.count("\n") == 1
    assert err.startswith(f"ReferencesError: {path}: ")
    assert re.search(message, err), err


def test_missing_file_and_missing_run_folder_are_one_line(tmp_path, capsys):
    code, _, err = verify(capsys, "--references", tmp_path / "none.yaml")
    assert code == 2 and err == (
        f"ReferencesError: {tmp_path / 'none.yaml'}: no such file (a references file is YAML: format, version, references)\n"
    )
    code, _, err = verify(capsys, tmp_path / "nowhere")
    assert code == 2 and err == f"RowsError: {tmp_path / 'nowhere'}: no such folder\n"


# The references file of ``bench.py verify`` is read through one bounded reader: a duplicate key, an
# alias bomb, deep nesting, a list where a scalar belongs, a huge number, a FIFO, and sizes a check
# would allocate for are each one line naming the file and what is allowed (issue 44).


BOMB = "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefg", "bcdefgh"))
ROPE = (
    "format: 1\nversion: 1\nreferences:\n- {{id: big, source: s, check: rope, method: rotary, head_dim: {hd}, "
    "length: {length}, inv_freq: {{0: 1.0}}, attention_factor: 1.0}}\n"
)


def verify_file(tmp_path, capsys, body: str):
    path = tmp_path / "refs.yaml"
    path.write_text(body)
    code = cli.main(["verify", "--references", str(path)])
    out = capsys.readouterr()
    assert code == 2 and out.out == "" and out.err.count("\n") == 1, out
    assert out.err.startswith(f"ReferencesError: {path}: "), out.err
    return out.err


@pytest.mark.parametrize(
    "body, message",
    [
        (
            "format: 1\nversion: 1\nversion: 2\nreferences: []\n",
            r"\(line 3\): version: duplicate key \(first at line 2\); allowed: each key once per mapping",
        ),
        (
            "format: 1\nversion: 1\na: &a [x, x, x, x, x, x, x, x, x]\n" + BOMB + "references: *h\n",
            r"aliases expand to more than 100000 nodes; allowed: aliases that keep the expanded document small",
        ),
        (
            "format: 1\nversion: 1\nreferences: " + "[" * 5000 + "]" * 5000 + "\n",
            r"nesting too deep; allowed: a few levels of mappings and lists",
        ),
        (
            "format: 1\nversion: " + "9" * 5000 + "\nreferences: []\n",
            r"an integer of 5000 digits; allowed: integers of at most 30 digits",
        ),
        (
            "format: 1\nversion: 1\nreferences:\n- {id: a, source: s, check: [rope]}\n",
            r"entry 1 \(a\): check \['rope'\] is not one of alibi_slopes, rope, value, ordering",
        ),
        (
            "format: 1\nversion: 1\nreferences:\n- {id: a, source: s, check: value, suite: x, metric: m, 1: 2}\n",
            r"entry 1 \(a\): unknown key\(s\) 1; allowed: ",
        ),
        (ROPE.format(hd=1_000_000_000, length=64), r"entry 1 \(big\): head_dim 1000000000 is too large; allowed: 2 to 65536"),
        (ROPE.format(hd=64, length=1_000_000_000), r"entry 1 \(big\): length 1000000000 is too large; allowed: 1 to 16777216"),
        (
            "format: 1\nversion: 1\nreferences:\n- {id: a, source: s, check: alibi_slopes, heads: 100000, slopes: [1]}\n",
            r"entry 1 \(a\): (slopes must be a list of 100000 numbers|heads 100000 is too large; allowed: 1 to 4096)",
        ),
    ],
)
def test_a_hostile_references_file_is_one_line(tmp_path, capsys, body, message):
    err = verify_file(tmp_path, capsys, body)
    assert re.search(message, err), err


def test_a_format_that_is_a_big_list_is_named_briefly(tmp_path, capsys):
    err = verify_file(tmp_path, capsys, "format: [" + ", ".join(["1"] * 50_000) + "]\nversion: 1\nreferences: []\n")
    assert "is not one this posbench reads; allowed: 1" in err and len(err) < 400


def test_a_fifo_as_references_file_is_one_line_not_a_hang(tmp_path, capsys):
    fifo = tmp_path / "refs.yaml"
    os.mkfifo(fifo)
    done = threading.Event()
    threading.Timer(10, lambda: done.is_set() or open(fifo, "wb").close()).start()  # never hang the suite
    code = cli.main(["verify", "--references", str(fifo)])
    done.set()
    err = capsys.readouterr().err
    assert code == 2 and err == f"ReferencesError: {fifo}: a FIFO, not a regular file; allowed: a regular file\n"


HOSTILE_LINES = (
    "!!python/object/apply:os.system [echo pwned]",
    "x: &a [*a]",
    "[" * 300,
    "9" * 5000,
    "\x00\x01",
    "key: {a: [",
    "\t- tab: 1",
    "references: 3",
    "- {id: " + "z" * 10000 + "}",
    "format: 2",
    "version: [1, 2]",
    "check: rope\nhead_dim: 1e30",
    "length: -5",
    "? [a, b]\n: c",
    "...",
    "---\n---",
)


def _mutate(text: str, rng) -> str:
    lines = text.splitlines()
    for _ in range(rng.randint(1, 3)):
        kind, i = rng.randrange(6), rng.randrange(len(lines))
        if kind == 0:  # a byte flipped
            line = lines[i] or " "
            j = rng.randrange(len(line))
            lines[i] = line[:j] + chr(rng.choice([rng.randrange(32, 127), rng.randrange(0, 32), 0x2028, 0xFEFF])) + line[j + 1 :]
        elif kind == 1:  # cut short
            return "\n".join(lines)[: rng.randrange(len(text))]
        elif kind == 2:  # a key given twice
            lines.insert(i, lines[i])
        elif kind == 3:  # a line gone
            del lines[i]
        elif kind == 4:  # a hostile line spliced in, at the indentation found there
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            lines.insert(i, indent + rng.choice(HOSTILE_LINES))
        else:  # a value swapped for another type
            head, sep, _ = lines[i].partition(": ")
            if sep:
                lines[i] = head + sep + rng.choice(["[1, 2]", "{a: 1}", "null", "9" * 40, "-1", "''", "1e400"])
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_fuzzed_references_files_end_in_one_line_or_a_verdict(tmp_path, capsys):
    """300 seeded mutations of the shipped references file: each gives a verdict (exit 0 or 1) or
    one line (exit 2), never a traceback or an internal error, and writes nothing."""
    import random
    from pathlib import Path

    import posbench

    shipped = (Path(posbench.__file__).parent / "references.yaml").read_text(encoding="utf-8")
    rng, path = random.Random(44), tmp_path / "refs.yaml"
    codes = {}
    for n in range(300):
        path.write_text(_mutate(shipped, rng), encoding="utf-8", errors="surrogatepass")
        code = cli.main(["verify", "--references", str(path)])
        out = capsys.readouterr()
        codes[code] = codes.get(code, 0) + 1
        assert code in (0, 1, 2), (n, code, out)
        assert "Traceback" not in out.err and "internal error" not in out.err, (n, out.err[-2000:])
        if code == 2:
            assert out.err.count("\n") == 1 and out.err.startswith("ReferencesError: "), (n, out.err[-2000:])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["refs.yaml"]
    assert codes.get(2, 0) > 100 and codes.get(0, 0) + codes.get(1, 0) > 10, codes  # both kinds were reached
