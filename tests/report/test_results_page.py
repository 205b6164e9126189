"""``posbench.report.results_page``: a docs/results page built from a run folder the test writes
says what was run, when, at which commit, on which machine, with which command, and holds the
run's tables (the same text ``bench.py report`` renders)."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest
import yaml

from posbench.cli import findings
from posbench.report import page_folder, results_page
from posbench.store.meta import RunMeta, write_run_meta
from posbench.tasks import find as find_task
from tests.helpers.result_runs import COMMIT, CPU_ENV, GPU_ENV, SETTINGS, write_run


def test_page_names_suite_run_date_commit_machine_torch_command_and_tables(tmp_path):
    run_dir = write_run(tmp_path, "cpu-cpu-1a2b3c4d", CPU_ENV)
    (page,) = results_page.write_pages([run_dir], tmp_path / "docs" / "results", find_task=find_task)
    assert page.name == "efficiency-cpu-test-cpu-9000.md"
    text = page.read_text()
    assert text.startswith("# efficiency on CPU (Test CPU 9000)")
    assert f'make docs-results RUNS="{run_dir.as_posix()}"' in text
    for field in (
        "**Suite**: `efficiency` version 4, task `efficiency`, profile `cpu`",
        "## Run `cpu-cpu-1a2b3c4d`",
        "**Date**: 2026-11-23 (rows started 2026-11-23T21:00:00+00:00 to 2026-11-23T21:01:00+00:00)",
        f"**posbench commit**: `{COMMIT}`;",
        "CPU: Test CPU 9000, 2 logical CPUs",
        "GPU: none",
        "torch 2.13.0+cpu",
        "Python 3.12.1",
    ):
        assert field in text, field
    # the tables: the run's own (ratios to the baseline), rendered as the report renders them
    assert "**Training speed (words/s), efficiency**" in text
    assert "| alibi | 19.0k (0.95x) | 9.50k (0.95x) |" in text
    assert "**Evaluation speed (words/s), efficiency**" in text


def test_page_opens_each_run_with_the_reports_summary_and_verdicts(tmp_path):
    from posbench.report.headline import table_line

    run_dir = write_run(tmp_path, "cpu-cpu-1a2b3c4d", CPU_ENV)
    section = results_page.RunSection(run_dir, find_task=find_task)
    text = section.markdown()
    summary = text[text.index("Summary (") : text.index(f"**{section.tables[0].title}**")]
    assert summary.splitlines()[2] == "- 4 cases: 4 ok."
    for table in section.tables:  # the same line the report's summary holds, verdict included
        line = table_line(table)
        assert f"- {line.text}" in summary.replace("\\", "")
    assert "alibi 0.95x. Not separable: sinusoidal, alibi." in summary  # one measurement each: no interval, no winner


def test_rebuilt_command_reruns_the_settings_and_grid_the_run_used(tmp_path):
    run_dir = write_run(tmp_path, "cpu-cpu-1a2b3c4d", CPU_ENV)
    section = results_page.RunSection(run_dir, find_task=find_task)
    assert not section.command_recorded
    argv = shlex.split(section.command.replace("\\\n", " "))
    assert argv[:10] == [
        "python",
        "bench.py",
        "--suite",
        "efficiency",
        "--profile",
        "cpu",
        "--device",
        "cpu",
        "--methods",
        "sinusoidal,alibi",
    ]
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    # every value reads back (with the suite loader's YAML) as the value the run used
    parsed = {k: yaml.safe_load(v) for k, _, v in (s.partition("=") for s in sets)}
    assert parsed == {**SETTINGS, "grid.seq_len": [64, 128]}
    assert isinstance(parsed["lr"], float)


def test_rebuilt_command_names_the_methods_the_rows_name_not_every_method_of_the_suite(tmp_path):
    """run.json lists the suite's methods; a run of ``--methods alibi`` reruns alibi alone."""
    run_dir = write_run(tmp_path, "cpu-cpu-1a2b3c4d", CPU_ENV)
    lines = [json.loads(line) for line in (run_dir / "cases.jsonl").read_text().splitlines()]
    (run_dir / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines if r["method"] == "alibi"))
    argv = shlex.split(results_page.RunSection(run_dir, find_task=find_task).command.replace("\\\n", " "))
    assert argv[argv.index("--methods") + 1] == "alibi"
    meta = RunMeta(
        suite="efficiency",
        version=4,
        task="efficiency",
        baseline="sinusoidal",
        methods=["sinusoidal", "alibi"],
        metrics=["train_wps"],
    )
    assert results_page.reconstruct_command(meta)[-1] == "sinusoidal,alibi"  # no rows read: the record's list
    assert results_page.reconstruct_command(meta, ["alibi", "nope"])[-1] == "alibi,nope"


def test_recorded_command_wins_and_gpu_runs_get_their_own_page(tmp_path):
    cpu_run = write_run(tmp_path, "cpu-cpu-1a2b3c4d", CPU_ENV)
    gpu_run = write_run(
        tmp_path,
        "gpu-cuda-5e6f7a8b",
        GPU_ENV,
        device="cuda",
        command=["python", "bench.py", "--suite", "efficiency", "--profile", "gpu"],
    )
    pages = results_page.write_pages([tmp_path / "results"], tmp_path / "out", find_task=find_task)
    assert sorted(p.name for p in pages) == ["efficiency-cpu-test-cpu-9000.md", "efficiency-nvidia-h100-80gb-hbm3.md"]
    gpu = (tmp_path / "out" / "efficiency-nvidia-h100-80gb-hbm3.md").read_text()
    assert "python bench.py --suite efficiency --profile gpu\n" in gpu and "as the runner recorded it" in gpu
    assert "GPU: NVIDIA H100 80GB HBM3 (driver 570.1)" in gpu and "CUDA 12.8" in gpu
    assert gpu_run.as_posix() in gpu and cpu_run.as_posix() not in gpu


def test_two_runs_of_a_suite_on_one_machine_share_a_page(tmp_path):
    first = write_run(tmp_path, "cpu-cpu-1a2b3c4d", CPU_ENV)
    second = write_run(tmp_path, "rep2", CPU_ENV)
    (page,) = results_page.write_pages([first, second], tmp_path / "out", find_task=find_task)
    text = page.read_text()
    assert text.index("## Run `cpu-cpu-1a2b3c4d`") < text.index("## Run `rep2`")
    assert f'RUNS="{first.as_posix()} {second.as_posix()}"' in text


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert results_page.main([]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    run_dir = write_run(tmp_path, "old", CPU_ENV)
    (run_dir / "run.json").unlink()
    assert results_page.main(["--out", str(tmp_path / "out"), str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no run.json" in err
    assert results_page.main(["--out", str(tmp_path / "out"), str(tmp_path / "missing")]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def _dry_run(argv: list[str], cwd: Path) -> tuple[str, dict]:
    """The run id and resolved settings ``bench.py ... --dry-run`` prints (nothing is run or written)."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, str(repo / "bench.py"), *argv, "--dry-run", "--results", str(cwd / "r")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    run_id = lines[0].rsplit(" run ", 1)[1]
    settings = json.loads(lines[1].removeprefix("settings: "))
    return run_id, settings


@pytest.mark.subprocess
def test_rebuilt_command_resolves_to_the_same_settings_and_run_id(tmp_path):
    """The command on a page, given to bench.py, resolves to the run's settings and run id."""
    original = [
        "--suite",
        "efficiency",
        "--profile",
        "cpu",
        "--device",
        "cpu",
        "--methods",
        "sinusoidal,alibi",
        "--set",
        "lr=0.00002",
        "--set",
        "windows=3",
        "--set",
        "method_options={alibi: {bias_dtype: compute}}",
        "--set",
        "grid.seq_len=[64, 96]",
    ]
    run_id, settings = _dry_run(original, tmp_path)
    run_dir = tmp_path / "results" / "efficiency" / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "cases.jsonl").write_text(
        json.dumps(
            {
                "case_id": "efficiency/alibi/seq_len=64",
                "method": "alibi",
                "status": "error",
                "params": {"seq_len": 64},
                "metrics": {},
                "device": "cpu",
                "run_id": run_id,
            }
        )
        + "\n"
    )
    write_run_meta(
        run_dir,
        RunMeta(
            suite="efficiency",
            version=4,
            task="efficiency",
            baseline="sinusoidal",
            methods=["sinusoidal", "alibi"],
            metrics=["train_wps"],
            settings=settings,
            grid={"seq_len": [64, 96]},
            profile="cpu",
            device="cpu",
            run_id=run_id,
        ),
    )
    argv = shlex.split(results_page.RunSection(run_dir, find_task=find_task).command.replace("\\\n", " "))
    assert argv[:2] == ["python", "bench.py"]
    assert _dry_run(argv[2:], tmp_path) == (run_id, settings)


def test_the_machine_line_names_the_cpu_vendor_and_vector_kernels_when_recorded(tmp_path):
    """env.json from issue 59 on names the CPU's vendor and torch's vector kernels; older ones
    (CPU_ENV has neither) still give the plain line."""
    intel = dict(CPU_ENV, cpu_vendor="GenuineIntel", cpu_capability="AVX512", cpu_extensions=["avx512f", "amx_tile"])
    machine = results_page.machine_of(intel, "cpu")["cpu"]
    assert machine.endswith("; vendor GenuineIntel; torch's CPU dispatch: AVX512 (flags: avx512f, amx_tile)")
    assert "vendor" not in results_page.machine_of(CPU_ENV, "cpu")["cpu"]
    run_dir = write_run(tmp_path, "cpu-cpu-1a2b3c4d", intel)
    (page,) = results_page.write_pages([run_dir], tmp_path / "docs" / "results", find_task=find_task)
    assert "vendor GenuineIntel; torch" in page.read_text()


# --- issue 67 item 2: page rebuilds own their files (a manifest) and touch no other ---


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def _two_machines(tmp_path: Path) -> Path:
    """A folder of published runs: one on a CPU, one on a GPU (two pages and the index)."""
    write_run(tmp_path / "published", "cpu-cpu-1a2b3c4d", CPU_ENV)
    write_run(tmp_path / "published", "gpu-cuda-5e6f7a8b", GPU_ENV, device="cuda")
    return tmp_path / "published" / "results"


def test_rebuild_lists_its_pages_and_removes_only_pages_it_wrote(tmp_path):
    published, out = _two_machines(tmp_path), tmp_path / "out"
    written = results_page.rebuild(published, out, find_task)
    pages = sorted(p.name for p in written)
    assert pages == ["README.md", "efficiency-cpu-test-cpu-9000.md", "efficiency-nvidia-h100-80gb-hbm3.md"]
    manifest = (out / page_folder.MANIFEST).read_text()
    assert manifest.startswith("# ") and manifest.splitlines()[-3:] == pages
    shutil.rmtree(published / "efficiency" / "gpu-cuda-5e6f7a8b")  # its page is stale now: it goes
    results_page.rebuild(published, out, find_task)
    assert sorted(_files(out)) == [page_folder.MANIFEST, "README.md", "efficiency-cpu-test-cpu-9000.md"]
    assert (out / page_folder.MANIFEST).read_text().splitlines()[-2:] == ["README.md", "efficiency-cpu-test-cpu-9000.md"]


@pytest.mark.parametrize("mode", ["published", "runs"])
def test_pages_refuse_an_out_folder_holding_files_they_did_not_write_in_one_line(tmp_path, capsys, mode):
    """``--out .`` or ``DOCS_RESULTS=docs`` would have emptied that folder: a folder holding files
    the pages did not write (a NOTES.txt, a guide.md, a folder) is refused, nothing touched."""
    published, out = _two_machines(tmp_path), tmp_path / "docs"
    out.mkdir()
    (out / "NOTES.txt").write_text("mine\n")
    (out / "guide.md").write_text("# A guide\n")
    (out / "images").mkdir()
    before = _files(out)
    source = ["--published", str(published)] if mode == "published" else [str(published)]
    assert results_page.main([*source, "--out", str(out)], find_task=find_task) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "NOTES.txt, guide.md, images" in err, err
    assert (
        f"allowed: a new or empty folder, or one holding only the pages make docs-results wrote there (listed in its {page_folder.MANIFEST})"
        in err
    )
    assert _files(out) == before and sorted(p.name for p in out.iterdir()) == ["NOTES.txt", "guide.md", "images"]


def test_pages_refuse_a_manifest_naming_what_no_page_is(tmp_path, capsys):
    published, out = _two_machines(tmp_path), tmp_path / "out"
    results_page.rebuild(published, out, find_task)
    (tmp_path / "victim.md").write_text("not a page\n")
    for listed in ("../victim.md", str(tmp_path / "victim.md"), "sub/x.md", ".hidden.md"):
        (out / page_folder.MANIFEST).write_text(f"# pages\nREADME.md\n{listed}\n")
        before = _files(out)
        assert results_page.main(["--published", str(published), "--out", str(out)], find_task=find_task) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and repr(listed) in err and "allowed: file names of pages" in err, err
        assert _files(out) == before and (tmp_path / "victim.md").read_text() == "not a page\n"


def test_pages_refuse_a_listed_page_that_is_now_a_link(tmp_path, capsys):
    published, out = _two_machines(tmp_path), tmp_path / "out"
    results_page.rebuild(published, out, find_task)
    (tmp_path / "victim.md").write_text("not a page\n")
    (out / "README.md").unlink()
    (out / "README.md").symlink_to(tmp_path / "victim.md")
    assert results_page.main(["--published", str(published), "--out", str(out)], find_task=find_task) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "README.md" in err, err
    assert (out / "README.md").is_symlink() and (tmp_path / "victim.md").read_text() == "not a page\n"


@pytest.mark.parametrize("mode", ["published", "runs"])
def test_pages_to_an_out_that_is_a_file_are_one_line(tmp_path, capsys, mode):
    published, out = _two_machines(tmp_path), tmp_path / "notes.txt"
    out.write_text("mine\n")
    source = ["--published", str(published)] if mode == "published" else [str(published)]
    assert results_page.main([*source, "--out", str(out)], find_task=find_task) == 2
    err = capsys.readouterr().err
    assert err == f"error: --out {out}: a file, not a folder; allowed: a folder (created when missing)\n"
    assert out.read_text() == "mine\n"


def test_preview_pages_join_the_manifest_and_a_rebuild_replaces_them(tmp_path):
    published, out = _two_machines(tmp_path), tmp_path / "out"
    results_page.rebuild(published, out, find_task)
    preview = write_run(tmp_path / "new", "rep2", dict(CPU_ENV, cpu="Other CPU"))
    (page,) = results_page.write_pages([preview], out, find_task=find_task)
    assert page.name in (out / page_folder.MANIFEST).read_text().splitlines()
    results_page.rebuild(published, out, find_task)  # the preview's page is no published run's: it goes
    assert not page.exists() and len(_files(out)) == 4


def test_runs_share_a_page_only_when_they_share_settings_grid_and_methods(tmp_path):
    """Issue 69: one run per page unless runs share settings and methods."""
    import json

    from tests.helpers.result_runs import CPU_ENV, write_run

    same = [write_run(tmp_path / n, f"cpu-cpu-1a2b3c4{n}", CPU_ENV) for n in ("a", "b")]
    other = write_run(tmp_path / "c", "cpu-cpu-9f9f9f9f", CPU_ENV)
    meta = json.loads((other / "run.json").read_text())
    meta["settings"]["windows"] = 7
    (other / "run.json").write_text(json.dumps(meta))
    pages = results_page.write_pages([*same, other], tmp_path / "pages", find_task)
    assert sorted(p.name for p in pages) == [
        "efficiency-cpu-test-cpu-9000-cpu-cpu-1a2b3c4a.md",
        "efficiency-cpu-test-cpu-9000-cpu-cpu-9f9f9f9f.md",
    ]
    shared = (tmp_path / "pages" / "efficiency-cpu-test-cpu-9000-cpu-cpu-1a2b3c4a.md").read_text()
    assert "## Run `cpu-cpu-1a2b3c4a`" in shared and "## Run `cpu-cpu-1a2b3c4b`" in shared and "9f9f9f9f" not in shared


def test_the_index_names_the_suites_no_published_run_gives_a_page(tmp_path):
    from tests.helpers.result_runs import CPU_ENV, write_run

    published = tmp_path / "published"
    shutil.copytree(write_run(tmp_path, "cpu-cpu-1a2b3c4d", CPU_ENV), published / "efficiency" / "cpu-cpu-1a2b3c4d")
    written = results_page.rebuild(
        published,
        tmp_path / "pages",
        find_task,
        suites={"efficiency": "", "frontier": "", "decode": "a GPU run (its cpu profile is no speed)"},
        answers=findings.findings,
    )
    index = next(p for p in written if p.name == "README.md").read_text()
    assert index.startswith("# Measured results\n\n## Findings\n")
    # without the project's questions the index opens with how its pages are made
    bare = results_page.index_text({}, "results/published")
    assert bare.startswith("# Measured results\n\n## How these pages are made")
    assert index.rstrip().endswith(
        "No published run yet (a page waits for one): `decode` (`python bench.py --suite decode`: a GPU run "
        "(its cpu profile is no speed)); `frontier` (`python bench.py --suite frontier`)."
    )
    assert "wall time 1 min)" in index  # rows started at 21:00 and 21:01, each ran 2 s: 62 s


def test_wall_time_counts_a_paired_groups_whole_time_not_one_cases_share():
    import pandas as pd

    rows = pd.DataFrame(
        {
            # a paired group of three (one start, each row a third of its 90 s), then a case alone
            "started_at": ["2026-12-07T10:00:00+00:00"] * 3 + ["2026-12-07T10:01:30+00:00"],
            "duration_s": [30.0, 30.0, 30.0, 45.0],
        }
    )
    assert results_page._wall_seconds(rows) == 90.0 + 45.0
    alone = pd.DataFrame({"started_at": ["2026-12-07T10:00:00+00:00", "2026-12-07T10:00:10+00:00"], "duration_s": [20.0, 5.0]})
    assert results_page._wall_seconds(alone) == 20.0
    assert results_page._wall_seconds(pd.DataFrame({"started_at": [None], "duration_s": [1.0]})) is None


def test_a_run_with_method_options_names_them_on_its_page(tmp_path):
    """A run that set its methods' options (issue 65's variants) says which, under its heading and
    in every finding quoted from it."""
    from tests.helpers.result_runs import CPU_ENV, write_run

    run_dir = write_run(tmp_path, "cpu-cpu-1a2b3c4d", CPU_ENV)
    assert results_page.RunSection(run_dir, find_task).method_options() == "alibi bias_dtype=compute"  # the helper's
    data = json.loads((run_dir / "run.json").read_text())
    data["settings"]["method_options"] = {"path_fox": {"gate_scale": "none"}, "irope": {"window": 16, "floor_scale": 8192}}
    (run_dir / "run.json").write_text(json.dumps(data))
    section = results_page.RunSection(run_dir, find_task)
    assert section.method_options() == "irope floor_scale=8192 window=16; path_fox gate_scale=none"
    assert "- **Method options** (not the defaults where given): irope floor_scale=8192 window=16; path_fox" in section.markdown()
    data["settings"]["method_options"] = {}
    (run_dir / "run.json").write_text(json.dumps(data))
    assert "Method options" not in results_page.RunSection(run_dir, find_task).markdown()  # none set: nothing said
