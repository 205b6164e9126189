"""Hardening round 5 (issue 56): the download's silence limit is stated where a user waits: in
``download --help`` and on the line each source starts with."""

import pytest

from posbench.cli import app as cli
from posbench.data.corpus import DataError
from posbench.data.download import DEADLINE_S, STALL_S, download_wikitext103


def test_the_help_states_the_silence_limit(capsys):
    with pytest.raises(SystemExit):
        cli.main(["download", "--help"])
    assert f"a source silent for {STALL_S:g} s, or too slow to finish within an hour" in capsys.readouterr().out
    assert DEADLINE_S == 3600


def test_each_source_starts_with_the_limit(tmp_path, capsys):
    (tmp_path / "not-a-zip").write_bytes(b"x" * 10)
    with pytest.raises(DataError):
        download_wikitext103(tmp_path / "data", url=(tmp_path / "not-a-zip").as_uri())
    assert f"(given up when silent for {STALL_S:g} s, or too slow to finish within 1 h" in capsys.readouterr().err
