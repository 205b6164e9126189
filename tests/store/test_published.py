"""Published rows and regenerable pages (issue 55 item 5): ``bench.py publish`` copies a run's rows
and records (nothing else, within a size limit) into results/published/, and every docs/results
page rebuilds byte for byte from what is published there, naming runs by repository paths."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path

import pytest

from posbench.cli import app as cli
from posbench.cli import findings
from posbench.report import page_folder, results_page
from posbench.run.suite import loading
from posbench.store import published
from posbench.tasks import find as find_task
from tests.helpers.result_runs import CPU_ENV, GPU_ENV, write_run

REPO = Path(__file__).resolve().parents[2]
PUBLISHED = REPO / "results" / "published"
PAGES = REPO / "docs" / "results"
# an absolute path of some machine: /tmp/..., /home/..., C:\\...; a page names repository paths only
MACHINE_PATH = re.compile(r"(?<![\w.:/-])(/(tmp|home|root|work|Users|mnt|var|opt|scratch|data|private)/|[A-Z]:\\)")


def test_every_docs_results_page_rebuilds_byte_identically_from_published_rows(tmp_path):
    suites = loading.pages_waiting()  # make docs-results names the suites without a page yet, and why
    written = results_page.rebuild(
        PUBLISHED, tmp_path, find_task, shown_root="results/published", suites=suites, answers=findings.findings
    )
    rebuilt = {p.name: p.read_bytes() for p in written}
    committed = {p.name: p.read_bytes() for p in PAGES.iterdir() if p.is_file() and p.name != page_folder.MANIFEST}
    # the list of the pages make docs-results wrote there (it replaces and removes only those)
    assert (PAGES / page_folder.MANIFEST).read_bytes() == (tmp_path / page_folder.MANIFEST).read_bytes()
    assert sorted(committed) == sorted(rebuilt), (
        "docs/results holds a page no published run gives (or lacks one): make docs-results"
    )
    for name, text in rebuilt.items():
        assert committed[name] == text, f"docs/results/{name} differs from its rebuild: make docs-results"
    # every page's charts: the same files, each chart's data (what it is drawn from) byte for byte;
    # the SVG only where this matplotlib wrote it (glyph outlines may differ between versions)
    charts = {p.name: p.read_bytes() for p in (tmp_path / "charts").iterdir()}
    assert sorted(p.name for p in (PAGES / "charts").iterdir()) == sorted(charts), "docs/results/charts: make docs-results"
    for name, data in charts.items():
        if name.endswith(".json"):
            assert (PAGES / "charts" / name).read_bytes() == data, f"docs/results/charts/{name} differs: make docs-results"
        else:
            assert data.startswith(b"<?xml") and b"<dc:date>" not in data


def test_published_rows_stay_small_and_pages_name_no_path_outside_the_repository():
    size = sum(p.stat().st_size for p in PUBLISHED.rglob("*") if p.is_file())
    assert 0 < size < published.MAX_TOTAL_BYTES == 20 * 2**20
    for run in PUBLISHED.glob("*/*"):
        assert sorted(p.name for p in run.rglob("*") if p.is_file()) == ["cases.jsonl", "env.json", "run.json"]
    for page in PAGES.glob("*.md"):
        # every page shows its runs' charts, and every chart it links is there
        linked = re.findall(r"\]\((charts/[^)]+)\)", page.read_text())
        assert page.name == "README.md" or any(link.endswith(".svg") for link in linked), f"{page.name} has no chart"
        assert all((PAGES / link).is_file() for link in linked), page.name
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
    gpu = published.publish(write_run(tmp_path / "gpu", "gpu-cuda-5e6f7a8b", GPU_ENV, device="cuda"), root)
    (_, stale, _) = results_page.rebuild(root, tmp_path / "pages", find_task, shown_root="results/published")
    shutil.rmtree(gpu)
    results_page.rebuild(root, tmp_path / "pages", find_task, shown_root="results/published")
    assert not stale.exists() and sorted(p.name for p in (tmp_path / "pages").iterdir()) == [
        ".generated",
        "README.md",
        "charts",
        page.name,
    ]
    assert not any("gpu-cuda" in p.name for p in (tmp_path / "pages" / "charts").iterdir())  # its charts went too
    # ... and a file it did not write refuses the rebuild in one line, untouched (issue 67)
    (tmp_path / "pages" / "legacy.md").write_text("hand-copied\n")
    assert results_page.main(["--published", str(root), "--out", str(tmp_path / "pages")], find_task=find_task) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert (tmp_path / "pages" / "legacy.md").read_text() == "hand-copied\n"


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


# --- issue 67 item 1: publish writes and deletes only inside the run's own published folder ---


def _tree(top: Path) -> dict[str, tuple]:
    """Every path under ``top`` (links not followed) -> what it is: a folder, a link and its
    target, or a file and its bytes; two snapshots differ exactly where something was written
    or deleted."""
    out = {}
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            path = Path(folder) / name
            if path.is_symlink():
                out[str(path)] = ("link", os.readlink(path))
            elif path.is_dir():
                out[str(path)] = ("dir",)
            else:
                out[str(path)] = ("file", path.read_bytes())
    return out


def _changed(before: dict, after: dict) -> set[str]:
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


def _with_suite(run_dir: Path, suite: str) -> Path:
    data = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**data, "suite": suite}))
    return run_dir


def _victim(folder: Path) -> Path:
    """A folder a link may point at: files a publish must neither overwrite nor delete."""
    folder.mkdir(parents=True)
    for name in ("cases.jsonl", "run.json", "env.json", "NOTES.txt"):
        (folder / name).write_text(f"not {name} of any run\n")
    return folder


@pytest.mark.parametrize("suite", ["{abs}", "../../docs", "a/b", "", "a\0b", ".", "..", "-x", "a\nb", "x" * 101])
def test_publish_refuses_a_suite_name_that_is_no_plain_name_and_writes_nothing(tmp_path, capsys, suite):
    run_dir = _with_suite(write_run(tmp_path, "cpu-cpu-1a2b3c4d", CPU_ENV), suite.format(abs=tmp_path / "abs"))
    _victim(tmp_path / "docs")
    before = _tree(tmp_path)
    assert cli.main(["publish", str(run_dir), "--to", str(tmp_path / "results" / "published")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "suite" in err and "allowed: letters, digits, _ . -" in err
    assert _tree(tmp_path) == before


def test_publish_names_the_copy_by_the_resolved_run_folder_and_keeps_other_runs(tmp_path, capsys, monkeypatch):
    root = tmp_path / "results" / "published"
    other = published.publish(write_run(tmp_path / "a", "other-run", CPU_ENV), root)
    run_dir = write_run(tmp_path, "cpu-cpu-1a2b3c4d", CPU_ENV)
    (run_dir / "checkpoints").mkdir()
    dest = root / "efficiency" / "cpu-cpu-1a2b3c4d"
    for spelled in (run_dir / "checkpoints" / "..", run_dir / ".", Path(".")):
        monkeypatch.chdir(run_dir)
        before = _tree(tmp_path)
        assert published.publish(spelled, root) == dest, spelled
        assert all(Path(p).is_relative_to(dest) for p in _changed(before, _tree(tmp_path))), spelled
        assert sorted(p.name for p in other.iterdir()) == ["cases.jsonl", "env.json", "run.json"]


def test_publish_refuses_a_run_folder_at_or_inside_the_published_root(tmp_path, capsys):
    root = tmp_path / "results" / "published"
    published.publish(write_run(tmp_path, "cpu-cpu-1a2b3c4d", CPU_ENV), root)
    nested = write_run(root / "efficiency" / "x", "nested-run", CPU_ENV)
    before = _tree(tmp_path)
    for run_dir in (root / "efficiency" / "cpu-cpu-1a2b3c4d", nested, root / "efficiency" / "cpu-cpu-1a2b3c4d" / "."):
        assert cli.main(["publish", str(run_dir), "--to", str(root)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"inside {root}" in err and "allowed: a run folder outside" in err
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("level", ["root", "suite", "run", "rows"])
def test_publish_refuses_a_link_on_the_destination_path(tmp_path, capsys, level):
    root = tmp_path / "results" / "published"
    run_dir = write_run(tmp_path, "cpu-cpu-1a2b3c4d", CPU_ENV)
    victim = _victim(tmp_path / "victim")
    dest = root / "efficiency" / "cpu-cpu-1a2b3c4d"
    link = {"root": root, "suite": root / "efficiency", "run": dest, "rows": dest / "rows"}[level]
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim, target_is_directory=True)
    before = _tree(tmp_path)
    assert cli.main(["publish", str(run_dir), "--to", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{link}: a symbolic link" in err and "allowed: a real folder" in err
    assert _tree(tmp_path) == before


def test_publish_deletes_only_its_own_files_of_an_earlier_copy(tmp_path):
    root = tmp_path / "published"
    dest = root / "efficiency" / "cpu-cpu-1a2b3c4d"
    (dest / "rows").mkdir(parents=True)
    (dest / "rows" / "0.jsonl").write_text("{}\n")  # an earlier copy of a sweep's rows: goes
    (dest / "rows" / "NOTES.txt").write_text("mine\n")
    (dest / "NOTES.txt").write_text("mine\n")
    (dest / "extra").mkdir()
    published.publish(write_run(tmp_path, "cpu-cpu-1a2b3c4d", CPU_ENV), root)
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*")) == [
        "NOTES.txt",
        "cases.jsonl",
        "env.json",
        "extra",
        "rows",
        "rows/NOTES.txt",
        "run.json",
    ]


HOSTILE = ["a", "x", ".", "..", "/", "\\", "-", " ", "~", "\0", "é", "\n", "efficiency", "{abs}"]
PLAIN_NAMES = ["a", "efficiency", "run.2", "x_y-z"]


def _name(rng: random.Random, alphabet: list[str]) -> str:
    """Half the time a plain name (so that some publishes go through), else 1-3 hostile pieces."""
    if rng.random() < 0.5:
        return rng.choice(PLAIN_NAMES)
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 3)))


def test_fuzz_publish_destinations_write_and_delete_only_the_runs_own_published_folder(tmp_path, monkeypatch):
    rng, outcomes = random.Random(67), {"published": 0, "refused": 0, "link refused": 0}
    monkeypatch.setattr(os, "fsync", lambda fd: None)  # durability is not checked here; 700 fsyncs take seconds
    for i in range(80):
        case = tmp_path / f"case{i}"
        root = case / "results" / "published"
        suite = _name(rng, HOSTILE).format(abs=case / "abs")
        name = _name(rng, [c for c in HOSTILE if c not in ("/", "\0", "{abs}")])
        try:
            run_dir = _with_suite(write_run(case / "src", name, CPU_ENV), suite)
        except (OSError, ValueError):  # a name no folder can have
            continue
        other_id = name if published.is_plain_name(name) else "other-run"
        for other_suite in ("efficiency", "other"):  # published runs a bad destination would delete
            published.publish(_with_suite(write_run(case / "others" / other_suite, other_id, CPU_ENV), other_suite), root)
        linked = rng.choice(
            [None, None, root, root / "efficiency", root / "efficiency" / name, root / suite, root / suite / name]
        )
        if linked is not None:
            try:
                if linked.is_dir() and not linked.is_symlink():
                    shutil.rmtree(linked)
                linked.parent.mkdir(parents=True, exist_ok=True)
                linked.symlink_to(_victim(case / "victim"), target_is_directory=True)
            except (OSError, ValueError):
                linked = None
        (run_dir / "checkpoints").mkdir(exist_ok=True)
        spelled = rng.choice([run_dir, run_dir / ".", run_dir / "checkpoints" / "..", Path(".")])
        monkeypatch.chdir(run_dir)
        before = _tree(case)
        try:
            dest = published.publish(spelled, root)
        except published.PublishError as exc:
            assert "\n" not in str(exc) and "allowed:" in str(exc), exc
            assert _tree(case) == before, (suite, name, linked, exc)
            outcomes["link refused" if "symbolic link" in str(exc) else "refused"] += 1
            continue
        outcomes["published"] += 1
        assert dest == root / suite / name and published.is_plain_name(suite), (suite, name)
        assert not any(p.is_symlink() for p in (root, root / suite, dest)), (suite, name, linked)
        changed = _changed(before, _tree(case))
        made = {str(root / suite)} - before.keys()  # the suite's folder, new when its first run is published
        assert all(Path(p).is_relative_to(dest) or p in made for p in changed), changed
    assert min(outcomes.values()) >= 8, outcomes


# --- issue 69: a published run is reproducible from the repository, or its page says why not ---


def test_publish_refuses_a_dirty_run_unless_allowed_and_its_page_says_so_in_bold(tmp_path, capsys):
    run_dir = write_run(tmp_path, "cpu-cpu-1a2b3c4d", {**CPU_ENV, "git_dirty": True})
    root = tmp_path / "published"
    assert cli.main(["publish", str(run_dir), "--to", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "git_dirty" in err and "allowed: a run from a clean commit, or --allow-dirty" in err
    assert not root.exists()
    assert cli.main(["publish", str(run_dir), "--to", str(root), "--allow-dirty"]) == 0
    (page, _index) = results_page.rebuild(root, tmp_path / "pages", find_task, shown_root="results/published")
    assert "- **Run from a tree with uncommitted changes (env.json `git_dirty` true)" in page.read_text()


@pytest.mark.parametrize("folder", ["/home/me/my_methods", "~/m", "../elsewhere", "plugins/../../x", "C:\\m"])
def test_publish_refuses_methods_from_outside_the_repository_and_the_page_hides_the_path(tmp_path, capsys, folder):
    command = ["python", "bench.py", "--suite", "efficiency", "--methods-dir", folder, "--methods", "mine"]
    run_dir = write_run(tmp_path, "cpu-cpu-1a2b3c4d", CPU_ENV, command=command)
    root = tmp_path / "published"
    assert cli.main(["publish", str(run_dir), "--to", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "outside the repository" in err and "--allow-outside-methods" in err
    assert not root.exists()
    assert cli.main(["publish", str(run_dir), "--to", str(root), "--allow-outside-methods"]) == 0
    (page, _index) = results_page.rebuild(root, tmp_path / "pages", find_task, shown_root="results/published")
    text = page.read_text()
    assert "- **Methods from outside the repository (1 `--methods-dir` folder(s)" in text
    assert folder not in text and "--methods-dir METHODS_DIR" in text


def test_publish_refuses_a_methods_path_outside_the_repository_unless_allowed(tmp_path, capsys):
    """POSBENCH_METHODS_PATH (env.json ``methods_path``) is refused as an outside --methods-dir is:
    one line, exit 2, the same flag, the same bold line on the page; a folder inside publishes."""
    run_dir = write_run(tmp_path, "cpu-cpu-1a2b3c4d", {**CPU_ENV, "methods_path": ["plugins", "/home/me/my_methods"]})
    root = tmp_path / "published"
    assert cli.main(["publish", str(run_dir), "--to", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "POSBENCH_METHODS_PATH" in err and "/home/me/my_methods" in err
    assert "allowed: methods from the repository, or --allow-outside-methods" in err and not root.exists()
    assert cli.main(["publish", str(run_dir), "--to", str(root), "--allow-outside-methods"]) == 0
    (page, _index) = results_page.rebuild(root, tmp_path / "pages", find_task, shown_root="results/published")
    assert "- **Methods from outside the repository (`POSBENCH_METHODS_PATH` named a folder" in page.read_text()
    inside = write_run(tmp_path / "in", "cpu-cpu-1a2b3c4d", {**CPU_ENV, "methods_path": ["plugins", "./contrib"]})
    assert published.publish(inside, tmp_path / "in-published").is_dir()


def test_a_methods_dir_inside_the_repository_publishes_as_recorded(tmp_path):
    for folder in ("plugins", "./contrib/methods", "a/../b", "--methods-dir=x"):
        argv = ["python", "bench.py", "--methods-dir", folder] if not folder.startswith("--") else ["bench.py", folder]
        assert published.outside_methods_dirs(argv) == []
        assert published.without_machine_paths(argv) == argv
    argv = ["bench.py", "--methods-dir=/opt/m", "--methods-dir", "ok"]
    assert published.outside_methods_dirs(argv) == ["/opt/m"]
    assert published.without_machine_paths(argv) == ["bench.py", "--methods-dir=METHODS_DIR", "--methods-dir", "ok"]
    run_dir = write_run(tmp_path, "cpu-cpu-1a2b3c4d", CPU_ENV, command=["python", "bench.py", "--methods-dir", "plugins"])
    dest = published.publish(run_dir, tmp_path / "published")
    (page, _index) = results_page.rebuild(tmp_path / "published", tmp_path / "pages", find_task, shown_root="results/published")
    assert (dest / "run.json").exists() and "**Methods from outside" not in page.read_text()
