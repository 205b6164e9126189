"""Chart and table file names and HTML ids come from a safe slug, never raw row text, and are
unique and stable: machine names that differ only in punctuation keep their own files (issue 26)."""

import re

import pytest

from posbench.report.build import build_report
from posbench.report.names import Stems, file_stem, slug, unique_keys
from posbench.report.render import row_anchor
from posbench.report.results_page import write_pages
from posbench.tasks import find as find_task
from tests.helpers.report_rows import CPU_ENV, efficiency_rows, retrieval_rows, write_run


def _two_machines(tmp_path):
    a = write_run(tmp_path / "runs", efficiency_rows(run_id="run-a"), env={**CPU_ENV, "cpu": "Acme X-1"})
    b = write_run(tmp_path / "runs", efficiency_rows(run_id="run-b"), env={**CPU_ENV, "cpu": "Acme X 1"})
    return a, b


def _ids(html: str) -> list[str]:
    return re.findall(r'\sid="([^"]*)"', html)


@pytest.fixture(scope="module")
def two_machines_report(tmp_path_factory):
    """(the two runs, the report's folder, what it wrote): built once, its charts take seconds."""
    tmp = tmp_path_factory.mktemp("two_machines")
    a, b = _two_machines(tmp)
    return (a, b), tmp / "out", build_report([a, b], tmp / "out", find_task=find_task)


def test_two_machines_differing_in_punctuation_keep_their_own_tables_charts_and_ids(two_machines_report):
    _, out, written = two_machines_report
    tables = [k for k in written if k.startswith("tables/") and k.endswith(".md")]
    on_disk = sorted(p.relative_to(out).as_posix() for p in (out / "tables").glob("*.md"))
    assert sorted(tables) == on_disk  # the count the report prints is the files it wrote
    md = written["report.md"].read_text()
    shown = md.count("\n**")  # every table is printed once in report.md, its title in bold
    assert shown == len(tables)
    per_machine = [sum(machine in (out / t).read_text() for t in tables) for machine in ("CPU (Acme X-1)", "CPU (Acme X 1)")]
    assert per_machine[0] == per_machine[1] >= 3 and sum(per_machine) == len(tables)
    charts = [k for k in written if k.startswith("charts/") and k.endswith(".png")]
    assert len(charts) == len(set(charts)) == 8
    ids = _ids(written["report.html"].read_text())
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1][:3]


def test_names_are_stable_from_one_report_to_the_next(two_machines_report, tmp_path):
    runs, _, written = two_machines_report
    first = sorted(written)
    second = sorted(build_report(list(runs), tmp_path / "two", find_task=find_task))
    assert first == second


def test_a_method_or_probe_with_a_slash_never_writes_outside_the_report(tmp_path):
    rows = retrieval_rows()
    rows[0]["method"] = "../../evil/x"
    rows[1]["method"] = "a/b"
    for r in rows[2:]:
        r["params"]["probe"] = "../../probe/y"
    run_dir = write_run(tmp_path / "runs", rows)
    before = {p for p in tmp_path.rglob("*")}
    out = tmp_path / "deep" / "out"
    written = build_report([run_dir], out, find_task=find_task)
    created = {p for p in tmp_path.rglob("*")} - before
    assert all(out in p.parents or p == out or p == out.parent for p in created), sorted(created)[:5]
    for key, path in written.items():
        assert path.resolve().parent in (out.resolve(), (out / "tables").resolve(), (out / "charts").resolve()), key
        assert "/" not in key.split("/", 1)[-1] and ".." not in key


def test_slugs_and_stems_are_safe_and_hashed_when_something_was_dropped():
    assert slug("efficiency-train_wps-CPU (Test CPU 9000)") == "efficiency-train-wps-cpu-test-cpu-9000"
    assert re.fullmatch(r"[0-9a-f]{8}", slug("///"))  # nothing left: the hash alone
    assert len(slug("x" * 1000)) <= 110
    assert file_stem("retrieval_passkey_accuracy") == "retrieval_passkey_accuracy"
    assert file_stem("a/b") != file_stem("a b") and "/" not in file_stem("a/b")
    assert file_stem("..").startswith("") and not file_stem("..").startswith(".")
    assert file_stem("a/b") == file_stem("a/b")
    stems = Stems()
    one, two = stems.take("chart", "first"), stems.take("chart", "second")
    assert one == "chart" and two != one and stems.take("chart", "first") == "chart"
    assert row_anchor("run", "a/n=1") != row_anchor("run", "a_n_1")


def test_unique_keys_hash_every_table_of_a_colliding_group():
    class T:
        def __init__(self, hardware):
            self.key, self.task, self.metric, self.title, self.hardware, self.caption = "k", "t", "m", "T", hardware, ""

    tables = [T("Acme X-1"), T("Acme X 1"), T("other")]
    tables[2].key = "other"
    unique_keys(tables)
    assert len({t.key for t in tables}) == 3 and tables[2].key == "other"
    assert all(t.key.startswith("k-") for t in tables[:2])


def test_results_pages_of_machines_differing_in_punctuation_stay_apart(tmp_path):
    a, b = _two_machines(tmp_path)
    pages = write_pages([a, b], tmp_path / "pages", find_task=find_task)
    assert len(pages) == 2 and len({p.name for p in pages}) == 2
    texts = sorted(p.read_text().splitlines()[0] for p in pages)
    assert texts == ["# efficiency on CPU (Acme X 1)", "# efficiency on CPU (Acme X-1)"]
    # written one at a time, the second machine's page does not overwrite the first's either
    one = write_pages([a], tmp_path / "apart", find_task=find_task)
    two = write_pages([b], tmp_path / "apart", find_task=find_task)
    assert one[0] != two[0] and one[0].read_text().startswith("# efficiency on CPU (Acme X-1)")
