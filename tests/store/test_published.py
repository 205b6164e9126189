"""Published rows and regenerable pages (issue 55 item 5): ``bench.py publish`` copies a run's rows
and records (nothing else, within a size limit) into results/published/, and every docs/results
page rebuilds byte for byte from what is published there, naming runs by repository paths."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from posbench.cli import app as cli
from posbench.report import results_page
from posbench.store import published
from posbench.tasks import find as find_task
from tests.helpers.result_runs import CPU_ENV, write_run

REPO = Path(__file__).resolve().parents[2]
PUBLISHED = REPO / "results" / "published"
PAGES = REPO / "docs" / "results"
# an absolute path of some machine: /tmp/..., /home/..., C:\\...; a page names repository paths only
MACHINE_PATH = re.compile(r"(?<![\w.:/-])(/(tmp|home|root|work|Users|mnt|var|opt|scratch|data|private)/|[A-Z]:\\)")


def test_every_docs_results_page_rebuilds_byte_identically_from_published_rows(tmp_path):
    written = results_page.rebuild(PUBLISHED, tmp_path, find_task, shown_root="results/published")
    rebuilt = {p.name: p.read_bytes() for p in written}
    committed = {p.name: p.read_bytes() for p in PAGES.iterdir() if p.is_file()}
    assert sorted(committed) == sorted(rebuilt), (
        "docs/results holds a page no published run gives (or lacks one): make docs-results"
    )
    for name, text in rebuilt.items():
        assert committed[name] == text, f"docs/results/{name} differs from its rebuild: make docs-results"


def test_published_rows_stay_small_and_pages_name_no_path_outside_the_repository():
    size = sum(p.stat().st_size for p in PUBLISHED.rglob("*") if p.is_file())
    assert 0 < size < published.MAX_TOTAL_BYTES == 20 * 2**20
    for run in PUBLISHED.glob("*/*"):
        assert sorted(p.name for p in run.rglob("*") if p.is_file()) == ["cases.jsonl", "env.json", "run.json"]
    for page in PAGES.glob("*.md"):
        text = page.read_text()
        assert not MACHINE_PATH.search(text), f"{page.name} names a path outside the repository"
        for folder in re.findall(r"`(results/[^`]+)`", text):
            assert (REPO / folder).is_dir() and folder.startswith("results/published/"), f"{page.name}: {folder}"


def test_publish_copies_rows_and_records_only(tmp_path, capsys):
    run_dir = write_run(tmp_path, "cpu-cpu-1a2b3c4d", CPU_ENV)
    (run_dir / "cases" / "alibi").mkdir(parents=True)
    (run_dir / "cases" / "alibi" / "events.out.tfevents.1").write_bytes(b"\0" * 100)
    (run_dir / "model.pt").write_bytes(b"\0" * 100)
    (run_dir / "table.md").write_text("a table\n")
    root = tmp_path / "published"
    assert cli.main(["publish", str(run_dir), "--to", str(root)]) == 0
    dest = root / "efficiency" / "cpu-cpu-1a2b3c4d"
    assert capsys.readouterr().out == f"published {run_dir} -> {dest.as_posix()}\n"
    assert sorted(p.name for p in dest.rglob("*")) == ["cases.jsonl", "env.json", "run.json"]
    for name in ("cases.jsonl", "env.json", "run.json"):
        assert (dest / name).read_bytes() == (run_dir / name).read_bytes()
    # the pages rebuilt from it name the run by its repository path and the plain make target
    (page, index) = results_page.rebuild(root, tmp_path / "pages", find_task, shown_root="results/published")
    assert "- **Run folder**: `results/published/efficiency/cpu-cpu-1a2b3c4d`" in page.read_text()
    assert "```bash\nmake docs-results\n```" in page.read_text()
    assert index.name == "README.md" and f"]({page.name}): `results/published/efficiency/cpu-cpu-1a2b3c4d`" in index.read_text()
    # a stale page there is removed: the folder holds only what published runs give
    (tmp_path / "pages" / "legacy.md").write_text("hand-copied\n")
    results_page.rebuild(root, tmp_path / "pages", find_task, shown_root="results/published")
    assert not (tmp_path / "pages" / "legacy.md").exists()


def test_publish_refuses_a_run_too_large_or_without_its_record_in_one_line(tmp_path, capsys, monkeypatch):
    run_dir = write_run(tmp_path, "cpu-cpu-1a2b3c4d", CPU_ENV)
    monkeypatch.setattr(published, "MAX_RUN_BYTES", 1000)
    assert cli.main(["publish", str(run_dir), "--to", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "over 1,000 bytes" in err and "allowed: a run of at most 1,000 bytes" in err
    monkeypatch.setattr(published, "MAX_RUN_BYTES", 4 * 2**20)
    monkeypatch.setattr(published, "MAX_TOTAL_BYTES", 1000)
    with pytest.raises(published.PublishError, match="allowed: at most 1,000 bytes in all"):
        published.publish(run_dir, tmp_path / "p")
    (run_dir / "run.json").unlink()
    with pytest.raises(published.PublishError, match="no run.json"):
        published.publish(run_dir, tmp_path / "p")
    assert not (tmp_path / "p").exists()


def test_the_recorded_command_on_a_page_drops_the_machines_results_folder():
    said = results_page.without_results("python bench.py --suite efficiency --results /tmp/x/res --fresh --results=/y")
    assert said == "python bench.py --suite efficiency --fresh"
