"""What a run folder says about where posbench came from, and who may read it (issue 42, item 6):
the commit only when posbench runs from its own checkout (a wheel inside some other git repository
records its installed version), every file a run and its report write with the umask's mode
(0644 under umask 022, never mkstemp's 0600), and no "CUDA not built with CUDA"."""

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from posbench import __version__
from posbench.cli import app as cli
from posbench.core import files
from posbench.engine import env
from tests.helpers.suites import make_suite

REPO = Path(__file__).resolve().parents[2]
GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed: no repository to ask")


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t", *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def _repo(folder: Path) -> str:
    """``folder`` made a git repository with one commit of what it holds; that commit."""
    _git(folder, "init", "-q")
    _git(folder, "add", "-A")
    _git(folder, "commit", "-q", "-m", "x")
    return _git(folder, "rev-parse", "HEAD")


@needs_git
def test_a_wheel_inside_another_repository_records_its_version_not_that_commit(tmp_path):
    project = tmp_path / "project"  # somebody's repository, with posbench installed in its venv
    package = project / ".venv" / "lib" / "python3.12" / "site-packages" / "posbench"
    shutil.copytree(REPO / "posbench" / "engine", package / "engine")
    (project / "README.md").write_text("someone else's project\n")
    foreign = _repo(project)
    assert env.own_checkout(package) is None
    got = env.provenance(package)
    assert got["git_commit"] == f"v{env.installed_version()}" != foreign
    assert got["git_dirty"] is None and got["posbench_source"].startswith("installed package, version ")
    # the same, with the package right at the other repository's top level: still not posbench's own
    (project / "posbench").mkdir()
    (project / "bench.py").write_text("")
    (project / "pyproject.toml").write_text('[project]\nname = "not-posbench"\n')
    assert env.own_checkout(project / "posbench") is None


@needs_git
def test_posbench_run_from_its_own_checkout_records_the_commit(tmp_path):
    top = tmp_path / "posbench-clone"
    (top / "posbench").mkdir(parents=True)
    (top / "posbench" / "__init__.py").write_text("")
    (top / "bench.py").write_text("")
    (top / "pyproject.toml").write_text('[project]\nname = "posbench"\nversion = "0.1.0"\n')
    commit = _repo(top)
    assert env.own_checkout(top / "posbench") == top
    assert env.provenance(top / "posbench") == {
        "git_commit": commit,
        "git_dirty": False,
        "posbench_source": f"git checkout {top}",
    }
    (top / "bench.py").write_text("# changed\n")
    assert env.provenance(top / "posbench")["git_dirty"] is True
    # a copy of the checkout without its .git: no commit to record
    shutil.rmtree(top / ".git")
    assert env.provenance(top / "posbench")["git_commit"] == f"v{env.installed_version()}"


def test_installed_version_falls_back_to_the_package_version(monkeypatch):
    import importlib.metadata

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert env.installed_version() == __version__
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "9.9.9")
    assert env.installed_version() == "9.9.9"


def test_env_json_never_says_not_built_with_cuda(monkeypatch):
    import torch

    monkeypatch.setattr(torch.version, "cuda", None)
    record = env.collect("cpu")
    assert record["cuda"] == env.NO_CUDA == "none (a CPU-only build of torch)"
    assert "not built with" not in json.dumps(record)
    assert {"git_commit", "git_dirty", "posbench_source"} <= set(record)


@pytest.fixture
def umask():
    """``umask(mask)`` sets this process's umask (inherited by workers) for one test."""
    before = os.umask(0o022)
    os.umask(before)
    yield lambda mask: os.umask(mask)
    os.umask(before)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_atomic_writes_get_the_mode_open_would_give(tmp_path, umask, mask):
    umask(mask)
    assert files.current_umask() == mask and files.new_file_mode() == 0o666 & ~mask
    path = files.atomic_write_text(tmp_path / "x.json", "{}")
    fd = files.open_nofollow(tmp_path / "rows.jsonl", os.O_WRONLY | os.O_CREAT)
    os.close(fd)
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE((tmp_path / "rows.jsonl").stat().st_mode) == 0o666 & ~mask


def _modes(folder: Path) -> dict[str, int]:
    """{relative path: permission bits} of every file under ``folder`` (hidden ones too)."""
    return {str(p.relative_to(folder)): stat.S_IMODE(p.stat().st_mode) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.subprocess  # a run: a worker process per case
@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o027, 0o640)])
def test_every_file_a_run_and_its_report_write_follows_the_umask(tmp_path, umask, mask, mode, capsys):
    make_suite(tmp_path, ["sinusoidal", "alibi"], grid="[1, 2]", rounds=2)
    umask(mask)
    run_dir = tmp_path / "res" / "t" / "r"
    assert (
        cli.main(
            [
                "--suite",
                str(tmp_path / "t.yaml"),
                "--device",
                "cpu",
                "--results",
                str(tmp_path / "res"),
                "--quiet",
                "--run-id",
                "r",
            ]
        )
        == 0
    )
    assert cli.main(["report", str(run_dir), "--out", str(tmp_path / "report")]) == 0
    written = _modes(run_dir)
    assert {"table.md", "table.csv", "env.json", "run.json", "cases.jsonl"} <= set(written)
    reported = _modes(tmp_path / "report")
    assert "report.html" in reported and any(name.endswith(".png") for name in reported)
    assert {name: m for name, m in {**written, **reported}.items() if m != mode} == {}
