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
ROPE = ("format: 1\nversion: 1\nreferences:\n- {{id: big, source: s, check: rope, method: rotary, head_dim: {hd}, "
        "length: {length}, inv_freq: {{0: 1.0}}, attention_factor: 1.0}}\n")


def verify(tmp_path, capsys, body: str):
    path = tmp_path / "refs.yaml"
    path.write_text(body)
    code = cli.main(["verify", "--references", str(path)])
    out = capsys.readouterr()
    assert code == 2 and out.out == "" and out.err.count("\n") == 1, out
    assert out.err.startswith(f"ReferencesError: {path}: "), out.err
    return out.err


@pytest.mark.parametrize("body, message", [
    ("format: 1\nversion: 1\nversion: 2\nreferences: []\n",
     r"\(line 3\): version: duplicate key \(first at line 2\); allowed: each key once per mapping"),
    ("format: 1\nversion: 1\na: &a [x, x, x, x, x, x, x, x, x]\n" + BOMB + "references: *h\n",
     r"aliases expand to more than 100000 nodes; allowed: aliases that keep the expanded document small"),
    ("format: 1\nversion: 1\nreferences: " + "[" * 5000 + "]" * 5000 + "\n",
     r"nesting too deep; allowed: a few levels of mappings and lists"),
    ("format: 1\nversion: " + "9" * 5000 + "\nreferences: []\n",
     r"an integer of 5000 digits; allowed: integers of at most 30 digits"),
    ("format: 1\nversion: 1\nreferences:\n- {id: a, source: s, check: [rope]}\n",
     r"entry 1 \(a\): check \['rope'\] is not one of alibi_slopes, rope, value, ordering"),
    ("format: 1\nversion: 1\nreferences:\n- {id: a, source: s, check: value, suite: x, metric: m, 1: 2}\n",
     r"entry 1 \(a\): unknown key\(s\) 1; allowed: "),
    (ROPE.format(hd=1_000_000_000, length=64), r"entry 1 \(big\): head_dim 1000000000 is too large; allowed: 2 to 65536"),
    (ROPE.format(hd=64, length=1_000_000_000), r"entry 1 \(big\): length 1000000000 is too large; allowed: 1 to 16777216"),
    ("format: 1\nversion: 1\nreferences:\n- {id: a, source: s, check: alibi_slopes, heads: 100000, slopes: [1]}\n",
     r"entry 1 \(a\): (slopes must be a list of 100000 numbers|heads 100000 is too large; allowed: 1 to 4096)"),
])
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
