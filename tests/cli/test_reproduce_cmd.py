"""``bench.py reproduce`` (issue 69): a published run's recorded command re-run into a fresh
folder and compared with the published run by compare's rules, exit 0/1/2 as compare; a
differently-set run and methods from outside the repository refused; ``--dry-run`` runs nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from posbench.cli import app as cli
from posbench.cli import reproduce_cmd
from tests.helpers.result_runs import CPU_ENV, write_run

COMMAND = ["python", "bench.py", "--suite", "efficiency", "--profile", "cpu", "--results", "/tmp/elsewhere", "--fresh"]


def _published(tmp_path: Path, command=COMMAND) -> Path:
    run = write_run(tmp_path / "src", "cpu-cpu-1a2b3c4d", CPU_ENV, command=command)
    dest = tmp_path / "results" / "published" / "efficiency" / run.name
    shutil.copytree(run, dest)
    return dest


def _fake_rerun(published: Path, calls: list, scale: float = 1.0, settings: dict | None = None):
    """A rerun that writes the published rows again (speeds times ``scale``) where it was told to."""

    def rerun(arguments: list[str]) -> int:
        calls.append(arguments)
        results = Path(arguments[arguments.index("--results") + 1])
        new = results / "efficiency" / published.name
        shutil.copytree(published, new)
        rows = [json.loads(line) for line in (new / "cases.jsonl").read_text().splitlines()]
        for row in rows:
            row["metrics"] = {k: v * scale for k, v in row["metrics"].items()}
            row["settings"] = {**row["settings"], **(settings or {})}
        (new / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        if settings:
            meta = json.loads((new / "run.json").read_text())
            meta["settings"].update(settings)
            (new / "run.json").write_text(json.dumps(meta))
        return 0

    return rerun


def test_reproduce_reruns_the_recorded_command_into_a_fresh_folder_and_compares(tmp_path, monkeypatch, capsys):
    published, calls = _published(tmp_path), []
    monkeypatch.setattr(reproduce_cmd, "rerun", _fake_rerun(_published(tmp_path / "p2"), calls))
    again = tmp_path / "again"
    assert cli.main(["reproduce", str(published), "--results", str(again)]) == 0
    # the machine's --results and --fresh are dropped; the rerun writes where reproduce says
    assert calls == [["--suite", "efficiency", "--profile", "cpu", "--results", str(again)]]
    out = capsys.readouterr().out
    assert out.startswith(f"reproduce: python bench.py --suite efficiency --profile cpu --results {again}\n")
    assert "**0 regression(s), 0 improvement(s)** over 4 case(s) found in both runs" in out


def test_a_slower_rerun_is_a_regression_and_a_differently_set_one_is_refused(tmp_path, monkeypatch, capsys):
    published = _published(tmp_path)
    monkeypatch.setattr(reproduce_cmd, "rerun", _fake_rerun(_published(tmp_path / "p2"), [], scale=0.5))
    assert cli.main(["reproduce", str(published), "--results", str(tmp_path / "slow")]) == 1
    capsys.readouterr()
    monkeypatch.setattr(reproduce_cmd, "rerun", _fake_rerun(_published(tmp_path / "p3"), [], settings={"windows": 5}))
    assert cli.main(["reproduce", str(published), "--results", str(tmp_path / "other")]) == 2
    err = capsys.readouterr().err
    assert "windows" in err and err.strip().count("\n") == 0


def test_dry_run_prints_the_command_and_runs_nothing(tmp_path, monkeypatch, capsys):
    published = _published(tmp_path)
    monkeypatch.setattr(reproduce_cmd, "rerun", lambda arguments: pytest.fail("--dry-run ran the suite"))
    assert cli.main(["reproduce", str(published), "--results", str(tmp_path / "r"), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"reproduce: python bench.py --suite efficiency --profile cpu --results {tmp_path / 'r'}"
    assert out[1].startswith(f"then: python bench.py compare {published.as_posix()} ")
    assert not (tmp_path / "r").exists()


def test_reproduce_refuses_no_run_and_methods_from_outside_the_repository_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(reproduce_cmd, "rerun", lambda arguments: pytest.fail("a refused run was re-run"))
    assert cli.main(["reproduce", str(tmp_path / "nothing")]) == 2
    assert "no published run (run.json)" in capsys.readouterr().err
    outside = _published(tmp_path, command=["python", "bench.py", "--suite", "efficiency", "--methods-dir", "/home/me/m"])
    assert cli.main(["reproduce", str(outside)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "outside the repository (--methods-dir /home/me/m)" in err


def test_a_run_without_a_recorded_command_reruns_the_command_rebuilt_from_run_json(tmp_path):
    run = write_run(tmp_path, "cpu-cpu-1a2b3c4d", CPU_ENV)
    arguments = reproduce_cmd.rerun_arguments(reproduce_cmd.recorded_argv(run), "out")
    assert arguments[:6] == ["--suite", "efficiency", "--profile", "cpu", "--device", "cpu"]
    assert "--set" in arguments and "grid.seq_len=[64, 128]" in arguments and arguments[-2:] == ["--results", "out"]
    assert reproduce_cmd.rerun_arguments(["posbench", "--suite", "x", "--results=/a", "--fresh"], "o") == [
        "--suite",
        "x",
        "--results",
        "o",
    ]


@pytest.mark.subprocess
def test_a_tiny_published_run_reproduces_end_to_end(tmp_path, capsys):
    """The real thing, small: a suite of the test-only task run, published, then reproduced by a
    new bench.py process into a fresh folder and compared (its values are exact: exit 0)."""
    from posbench.store.published import publish
    from tests.helpers.suites import make_suite

    suite = make_suite(tmp_path, ["sinusoidal", "alibi"], grid="[1, 2]")
    assert cli.main(["--suite", str(suite), "--results", str(tmp_path / "results")]) == 0
    (run,) = (tmp_path / "results" / "t").iterdir()
    published = publish(run, tmp_path / "published", allow_dirty=True)  # a test runs from a working tree
    capsys.readouterr()
    again = tmp_path / "again"
    assert cli.main(["reproduce", str(published), "--results", str(again)]) == 0
    out = capsys.readouterr().out
    assert "**0 regression(s), 0 improvement(s)** over 4 case(s) found in both runs" in out
    assert {"cases.jsonl", "env.json", "run.json"} <= {p.name for p in (again / "t" / run.name).iterdir()}
