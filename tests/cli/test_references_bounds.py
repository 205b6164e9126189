"""The references file of ``bench.py verify`` is read through one bounded reader: a duplicate key,
an alias bomb, deep nesting, a list where a scalar belongs, a huge number, a FIFO, and sizes a
check would allocate for are each one line naming the file and what is allowed (issue 44)."""

from __future__ import annotations

import os
import re
import threading

import pytest

from posbench.cli import app as cli

BOMB = "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefg", "bcdefgh"))
ROPE = (
    "format: 1\nversion: 1\nreferences:\n- {{id: big, source: s, check: rope, method: rotary, head_dim: {hd}, "
    "length: {length}, inv_freq: {{0: 1.0}}, attention_factor: 1.0}}\n"
)


def verify(tmp_path, capsys, body: str):
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
    err = verify(tmp_path, capsys, body)
    assert re.search(message, err), err


def test_a_format_that_is_a_big_list_is_named_briefly(tmp_path, capsys):
    err = verify(tmp_path, capsys, "format: [" + ", ".join(["1"] * 50_000) + "]\nversion: 1\nreferences: []\n")
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
