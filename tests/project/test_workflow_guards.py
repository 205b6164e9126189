"""What keeps the GPU workflow from ending green on nothing: it fetches and caches the corpus its
suites' gpu profiles read, a failed case fails the job, checkpoints are not uploaded, the report
job installs no triton and fails on failed cases, and the job summary holds Markdown tables, not
image links it cannot show (the charts are files of the uploaded artifact)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from posbench.cli.app import parser
from posbench.run import suite as suitemod

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / ".github" / "workflows" / "gpu-bench.yml"


def _doc() -> dict:
    doc = yaml.safe_load(GPU.read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the bare key `on` as True
    return doc


def _index(job: dict, needle: str, key: str = "run") -> int:
    (found,) = [i for i, s in enumerate(job["steps"]) if needle in str(s.get(key, ""))]
    return found


def _gpu_corpora() -> dict[str, str]:
    """suite -> the corpus kind its gpu profile reads (suites that read none are left out)."""
    out = {}
    for path in sorted((ROOT / "suites").glob("*.yaml")):
        corpus = suitemod.resolve(suitemod.load(path), "gpu", {}).settings.model_dump().get("corpus")
        if isinstance(corpus, dict):
            out[path.stem] = corpus.get("kind", "synthetic")
    return out


def test_the_suites_whose_gpu_profile_reads_wikitext_103_get_it_downloaded_and_cached():
    bench = _doc()["jobs"]["bench"]
    needs = sorted(s for s, kind in _gpu_corpora().items() if not kind.startswith("synthetic"))
    assert {_gpu_corpora()[s] for s in needs} == {"wikitext-103"}  # the one corpus bench.py download fetches
    assert sorted(json.loads(bench["env"]["WIKITEXT_SUITES"])) == needs == ["extrapolation", "frontier", "precision"]
    assert bench["env"]["POSBENCH_DATA_DIR"] == "${{ github.workspace }}/data"  # what bench.py reads
    restore, download = bench["steps"][_index(bench, "cache/restore", "uses")], bench["steps"][_index(bench, "download")]
    save = bench["steps"][_index(bench, "cache/save", "uses")]
    when = "contains(fromJSON(env.WIKITEXT_SUITES), matrix.suite)"
    assert restore["if"] == when and download["if"] == f"{when} && steps.corpus.outputs.cache-hit != 'true'"
    assert restore["id"] == "corpus" and download["id"] == "download"
    assert save["if"] == "steps.download.outcome == 'success'"  # saved at once, even if the run then fails
    assert restore["with"] == save["with"] and restore["with"]["path"] == "data/wikitext-103"
    assert "hashFiles('posbench/data/download.py')" in restore["with"]["key"]
    # bench.py download, as the venv's console script (the same CLI; nothing named bench.py runs on the GPU)
    assert download["run"] == '"$VENV_DIR/bin/posbench" download wikitext-103 --data "$POSBENCH_DATA_DIR"'
    sub = next(a for a in parser()._actions if a.dest == "command").choices["download"]
    assert "wikitext-103" in next(a for a in sub._actions if a.dest == "corpus").choices
    order = [
        _index(bench, "make install"),
        _index(bench, "cache/restore", "uses"),
        _index(bench, "download"),
        _index(bench, "cache/save", "uses"),
        _index(bench, "make bench"),
    ]
    assert order == sorted(order)  # installed, restored, fetched, saved, then run


def test_a_failed_case_fails_the_bench_job_and_the_rows_still_go_over():
    bench = _doc()["jobs"]["bench"]
    assert "continue-on-error" not in bench
    make = bench["steps"][_index(bench, "make bench")]
    assert "continue-on-error" not in make and "if" not in make
    assert not re.search(r"\|\|\s*true|set \+e|; *true\b", make["run"])  # exit 3 is not masked
    assert "--allow-failures" not in GPU.read_text() + (ROOT / "Makefile").read_text()
    upload = bench["steps"][_index(bench, "upload-artifact", "uses")]
    assert upload["if"].startswith("always()")  # a failed run's rows are still reported


def test_checkpoints_are_not_uploaded():
    bench = _doc()["jobs"]["bench"]
    upload = bench["steps"][_index(bench, "upload-artifact", "uses")]
    paths = upload["with"]["path"].splitlines()
    assert paths == ["results/${{ matrix.suite }}/", "!results/${{ matrix.suite }}/**/checkpoints/**"]


def test_the_report_job_installs_cpu_torch_and_no_triton():
    report = _doc()["jobs"]["report"]
    scripts = "\n".join(s.get("run", "") for s in report["steps"])
    assert "make install" not in scripts and ".[dev]" not in scripts  # the dev extra holds triton
    install = report["steps"][_index(report, "pip install -q -e .")]
    assert '.venv/bin/pip install -q --index-url https://download.pytorch.org/whl/cpu "$SPEC"' in install["run"]
    assert install["env"]["SPEC"] == "${{ steps.venv.outputs.torch_spec }}"  # the Makefile's TORCH_SPEC
    assert "pip show -q triton" in install["run"] and "exit 1" in install["run"]  # checked, not assumed
    assert [line for line in scripts.splitlines() if "triton" in line] == [
        '  if .venv/bin/pip show -q triton 2>/dev/null; then echo "::error::triton was installed"; exit 1; fi'.strip()
    ]
    assert _index(report, "pip install -q -e .") < _index(report, "bench.py report")


def test_the_job_summary_holds_tables_and_names_the_charts_in_the_artifact():
    report = _doc()["jobs"]["report"]
    step = report["steps"][_index(report, "bench.py report")]
    assert "cat report/report.md" not in step["run"]  # its image links show nothing in a job summary
    assert (
        '.venv/bin/python -m posbench.cli.ci_summary "$RUN_DIR" --report report --artifact "$ARTIFACT" >> "$GITHUB_STEP_SUMMARY"'
    ) in step["run"]
    upload = next(s for s in report["steps"] if str(s.get("with", {}).get("name", "")).startswith("report-"))
    assert step["env"]["ARTIFACT"] == upload["with"]["name"]  # the summary names the artifact uploaded
    assert "report/" in upload["with"]["path"].splitlines()


def test_the_report_job_fails_on_failed_cases_after_publishing():
    report = _doc()["jobs"]["report"]
    fail = report["steps"][-1]
    assert fail["if"].startswith("always()") and "steps.decide.outputs.failed_cases != '0'" in fail["if"]
    assert fail["env"]["FAILED"] == "${{ steps.decide.outputs.failed_cases }}" and "exit 1" in fail["run"]
    names = [s.get("name") for s in report["steps"]]
    assert names.index("Publish the baseline") < names.index("Upload report and comparison") < len(names) - 1
