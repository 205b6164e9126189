"""Run folders written by an older posbench read the same today: merged rows, run.json, resume
plans, ``report``, ``compare`` and ``status`` (the on-disk format never migrates).

``fixtures/old_runs`` was written at commit 5cf7349 (before ``posbench.store``): the ``_testing``
suites beside it run through ``bench.py run`` (rounds with a failing case, paired windows, a sweep
through ``--launcher local``) and efficiency rows from ``tests.helpers.report_rows``.
``fixtures/old_runs_expected.json`` holds what that commit's code read from them (rows, run.json,
plans, status); the ``report`` and ``compare`` texts in it follow today's wording (issue 66's
intervals as they are, memory's resolution, report.md's summary), the numbers unchanged.
"""

import contextlib
import io
import json
import shutil
from pathlib import Path

from posbench.cli.app import main
from posbench.run import suite as suitemod
from posbench.run.options import RunOptions
from posbench.run.schedule import plan_rounds
from posbench.store.meta import read_run_meta
from posbench.store.run_rows import case_rows, latest_rounds, read_run_rows

FIXTURES = Path(__file__).parent / "fixtures"


def _cli(root: Path, *argv: str) -> list:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return [rc, out.getvalue().replace(str(root), "ROOT")]


def observe(root: Path) -> dict:
    """What the readers make of the run folders under ``root`` (the same as the capture at 5cf7349)."""
    out: dict = {}
    for d in sorted(p.parent for p in root.rglob("cases.jsonl")):
        name = str(d.relative_to(root))
        rows = read_run_rows(d, [])
        out[f"merged {name}"] = case_rows(rows)
        out[f"latest {name}"] = [list(k) for k in latest_rounds(rows)]
        meta = read_run_meta(d)
        out[f"meta {name}"] = meta.__dict__ if meta else None
    for name in ("rounds", "windows", "sweep"):
        suite = suitemod.resolve(suitemod.load(root / f"{name}.yaml"), "default", {})
        for retry in (False, True):
            plan = plan_rounds(suite, RunOptions("cpu", root / "res", retry_failed=retry), "old", root / "res" / name / "old")
            todo, done = plan.todo, plan.done
            out[f"plan {name} {retry}"] = [[c.id, r] for c, r in todo] + [sorted(map(list, done))]
    out["compare"] = _cli(root, "compare", str(root / "res/efficiency/eff-a"), str(root / "res/efficiency/eff-b"))
    out["compare rounds"] = _cli(root, "compare", str(root / "res/rounds/old"), str(root / "res/rounds/old"))
    out["status"] = _cli(root, "status", str(root / "res/sweep/old"))
    for name in ("rounds/old", "windows/old", "sweep/old", "efficiency", "effw/eff-w"):
        rep = root / "report" / name
        _cli(root, "report", str(root / "res" / name), "--out", str(rep))
        for f in sorted(rep.rglob("*")):
            if f.suffix in (".md", ".csv", ".tex"):
                out[f"report {name} {f.relative_to(rep)}"] = f.read_text().replace(str(root), "ROOT")
    return json.loads(json.dumps(out, sort_keys=True, default=str))


def test_old_run_folders_read_the_same(tmp_path):
    root = tmp_path / "old"
    shutil.copytree(FIXTURES / "old_runs", root)
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    expected = json.loads((FIXTURES / "old_runs_expected.json").read_text())
    got = observe(root)
    assert sorted(got) == sorted(expected)
    for key in expected:
        assert got[key] == expected[key], key
    # Reading never rewrites a stored row (the report writes only under its --out folder).
    assert {p: p.read_bytes() for p in before} == before
