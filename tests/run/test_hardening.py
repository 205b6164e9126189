"""Hardening (issue 13): data never runs code, no fault loses a row, every bad input is one line.

Each test reproduces one defect kind found by trying the harness as an attacker and a careless
user would; the test names say which.
"""
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from posbench.cli import app as cli
from posbench.run import runner
from posbench.run import suite as suitemod
from posbench.run.suite import SuiteError

from tests.helpers.suites import VALID

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path, text, name="t.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def load_error(tmp_path, text) -> str:
    with pytest.raises(SuiteError) as info:
        suitemod.load(write(tmp_path, text))
    message = str(info.value)
    assert "\n" not in message and "allowed:" in message
    return message


def efficiency_suite(extra: str = "", grid: str = "[64]") -> str:
    return textwrap.dedent(f"""\
        name: e
        description: efficiency test
        version: 1
        task: efficiency
        methods: [sinusoidal, alibi]
        grid:
          seq_len: {grid}
        settings:
          model: tiny
          tokens_per_step: 128
        """) + extra


# ---------------------------------------------------------------- resource exhaustion (YAML)


def test_alias_bomb_is_refused_quickly(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):  # 9**10 nodes once expanded
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    t0 = time.perf_counter()
    msg = load_error(tmp_path, VALID + "\n".join(lines) + "\n")
    assert time.perf_counter() - t0 < 5
    assert "aliases expand to more than 100000 nodes" in msg


def test_recursive_alias_is_one_line(tmp_path):
    assert "an alias refers to a node that contains it" in load_error(tmp_path, VALID + "x: &a [*a]\n")


def test_large_file_is_refused_before_reading(tmp_path):
    big = VALID + "junk:\n" + "  - 0123456789\n" * 100_000  # ~1.4 MB under an unknown key
    t0 = time.perf_counter()
    msg = load_error(tmp_path, big)
    assert time.perf_counter() - t0 < 2
    assert "<file>: the file is" in msg and "allowed: at most 1048576 bytes" in msg


def test_line_lookup_is_linear(tmp_path):
    # 90k items under an unknown key (under the size cap): the error needs one line number, and
    # finding it must not build a table of every key path first.
    text = VALID + "junk: [" + ",".join(["1"] * 90_000) + "]\n"
    t0 = time.perf_counter()
    msg = load_error(tmp_path, text)
    assert time.perf_counter() - t0 < 10
    assert ":18: junk: unknown key" in msg


def test_line_lookup_walks_the_tree():
    data, lines = suitemod._parse("a:\n  b:\n    - 1\n    - c: 2\nd: 3\n", "x")
    assert lines.line(("a", "b", 1, "c")) == 4
    assert lines.line(("a", "b", 0)) == 3
    assert lines.line(("a", "missing")) == 1 and lines.line(("d",)) == 5 and lines.line(()) == 1


@pytest.mark.parametrize("text, expect", [
    ("x: {? [1, 2] : 3}\n", "<yaml>: a list used as a mapping key; allowed: plain keys"),
    ("x: {? {a: 1} : 3}\n", "<yaml>: a mapping used as a mapping key"),
    ("x: 1" + "0" * 5000 + "\n", "<yaml>: an integer of 5001 digits; allowed: integers of at most 30 digits"),
    ("x: " + "[" * 2000 + "]" * 2000 + "\n", "<yaml>: nesting too deep"),
])
def test_yaml_that_used_to_escape_as_a_traceback(tmp_path, text, expect):
    msg = load_error(tmp_path, VALID + text)
    assert f"t.yaml:{VALID.count(chr(10)) + 1}: " in msg or "nesting" in expect
    assert expect in msg


def test_merge_keys_are_supported(tmp_path):
    text = VALID.replace("profiles:\n  cpu:\n", "profiles:\n  cpu: &base\n") + \
        "  other:\n    <<: *base\n    description: merged\n"
    loaded = suitemod.load(write(tmp_path, text))
    other = suitemod.resolve(loaded, "other")
    assert other.settings.behaviour == "sleep" and other.grid == {"n": [3]}
    assert loaded.file.profiles["other"].description == "merged"  # its own key wins over the merge


def test_merged_key_error_points_at_the_anchor(tmp_path):
    text = VALID.replace("      behaviour: sleep", "      behaviour: dance") \
        .replace("profiles:\n  cpu:\n", "profiles:\n  cpu: &base\n") + "  other:\n    <<: *base\n"
    msg = load_error(tmp_path, text)
    assert ":15: profiles.cpu.settings.behaviour:" in msg


# ---------------------------------------------------------------- validation before anything runs


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", ".NaN"])
def test_non_finite_floats_are_refused(tmp_path, value):
    msg = load_error(tmp_path, VALID.replace("  timeout_s: 30", f"  timeout_s: 30\n  sleep_s: {value}"))
    assert ":12: settings.sleep_s: non-finite number" in msg and "allowed: finite numbers" in msg


def test_non_finite_in_set_and_grid(tmp_path):
    with pytest.raises(SuiteError, match=r"^--set sleep_s: sleep_s: non-finite number inf; allowed: finite"):
        suitemod.parse_set(["sleep_s=.inf"])
    with pytest.raises(SuiteError, match=r"^--set grid.n: grid.n\[1\]: non-finite number nan"):
        suitemod.parse_set(["grid.n=[1, .nan]"])


def test_seeds_beyond_64_bits(tmp_path):
    msg = load_error(tmp_path, VALID.replace("  timeout_s: 30", "  timeout_s: 30\n  seed: 18446744073709551616"))
    assert ":12: settings.seed: integer 18446744073709551616 does not fit in 64 bits" in msg
    with pytest.raises(SuiteError, match="does not fit in 64 bits"):
        suitemod.parse_set(["seed=-9223372036854775809"])
    assert suitemod.parse_set(["seed=9223372036854775807"]) == {"seed": 2**63 - 1}


def test_duplicate_grid_values(tmp_path):
    msg = load_error(tmp_path, VALID.replace("n: [1, 2]", "n: [1, 2, 1]"))
    assert ":9: grid.n[2]: 1 is listed twice; allowed: each value once per axis" in msg
    loaded = suitemod.load(write(tmp_path, VALID))
    with pytest.raises(SuiteError, match=r"^--set grid.n: grid.n\[1\]: 7 is listed twice"):
        suitemod.resolve(loaded, "cpu", suitemod.parse_set(["grid.n=[7, 7]"]))


def test_duplicate_kernel_variants(tmp_path):
    text = (REPO / "suites" / "kernels.yaml").read_text().replace(
        "methods: [alibi_triton, t5_triton,", "methods: [alibi_triton, t5_triton, alibi_triton,")
    msg = load_error(tmp_path, text)
    assert "methods[2]: 'alibi_triton' is listed twice; allowed: each method once" in msg


def test_tokens_per_step_shorter_than_seq_len(tmp_path):
    msg = load_error(tmp_path, efficiency_suite(grid="[64, 256]"))
    assert ":7: grid.seq_len[1]: seq_len 256 is longer than tokens_per_step 128" in msg
    loaded = suitemod.load(write(tmp_path, efficiency_suite()))
    with pytest.raises(SuiteError, match=r"t.yaml:7: grid.seq_len\[0\]: seq_len 64 is longer than tokens_per_step 32"):
        suitemod.resolve(loaded, "default", {"tokens_per_step": 32})


def test_method_options_for_a_method_not_in_the_suite(tmp_path):
    msg = load_error(tmp_path, efficiency_suite("  method_options:\n    rotary: {base: 100}\n"))
    assert ":12: settings.method_options.rotary: options for 'rotary', which is not in methods; " \
           "allowed: sinusoidal, alibi" in msg


def test_method_options_not_in_the_constructor_signature(tmp_path):
    from posbench.core import registry
    import inspect

    taken = [p for p in inspect.signature(registry.get("alibi").__init__).parameters if p not in ("self", "cfg")]
    msg = load_error(tmp_path, efficiency_suite("  method_options:\n    alibi: {slopes_base: 3}\n"))
    assert ":12: settings.method_options.alibi.slopes_base: alibi takes no option 'slopes_base'; " \
           f"allowed: {', '.join(taken)}" in msg
    ok = efficiency_suite("  method_options:\n    alibi: {" + taken[0] + ": compute}\n")
    suitemod.load(write(tmp_path, ok))  # an option the constructor takes passes


@pytest.mark.parametrize("override, problem", [
    ("{n_heads: 0}", "n_heads must be a positive integer"),
    ("{n_heads: 5}", "must be divisible by n_heads (5)"),
    ("{dropout: 1}", "dropout must be in [0, 1)"),
])
def test_model_overrides_out_of_range(tmp_path, override, problem):
    msg = load_error(tmp_path, efficiency_suite(f"  model_overrides: {override}\n"))
    assert ":11: settings.model_overrides: " in msg and problem in msg


def test_duplicate_keys_in_a_set_mapping():
    with pytest.raises(SuiteError, match=r"^--set by_method: by_method.alibi: duplicate key"):
        suitemod.parse_set(["by_method={alibi: ok, alibi: raise}"])
    with pytest.raises(SuiteError, match=r"^--set seed: seed: set twice"):
        suitemod.parse_set(["seed=1", "seed=2"])
    with pytest.raises(SuiteError, match="aliases expand to more than"):
        bomb = "[" + ", ".join(["&a0 [1,1,1,1,1,1,1,1,1,1]"] + [f"&a{i} [" + ",".join([f"*a{i-1}"] * 10) + "]"
                                                                for i in range(1, 7)]) + "]"
        suitemod.parse_set([f"x={bomb}"])


@pytest.mark.parametrize("name", ["..", ".", ".hidden", "-x", "a/b", "/abs", "x" * 101])
def test_suite_name_must_be_a_plain_folder_name(tmp_path, name):
    msg = load_error(tmp_path, VALID.replace("name: t", f"name: {json.dumps(name)}"))
    assert ":1: name: not a plain folder name" in msg or ":1: name: " in msg


@pytest.mark.parametrize("run_id", ["../x", "/tmp/x", "..", "a/b", ""])
def test_run_id_must_be_a_plain_folder_name(tmp_path, run_id, capsys):
    path = write(tmp_path, VALID)
    results = tmp_path / "results"
    code = cli.main(["--suite", str(path), "--device", "cpu", "--results", str(results), "--run-id", run_id])
    assert code == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--run-id" in err and "not a plain folder name" in err
    assert not results.exists() and not (tmp_path / "x").exists()


# ---------------------------------------------------------------- security


def test_planted_checkpoint_does_not_run_code(tmp_path):
    import torch

    from posbench.engine.train import load_checkpoint

    marker = tmp_path / "pwned"

    class Planted:
        def __reduce__(self):
            return exec, (f"open({str(marker)!r}, 'w').write('ran')",)

    path = tmp_path / "model.pt"
    torch.save({"model_config": Planted(), "model": {}}, path)
    with pytest.raises(ValueError, match=r"model.pt: not a plain posbench checkpoint, refused without running it"):
        load_checkpoint(path)
    assert not marker.exists()


SUITE = """\
name: t
description: hardening
version: 1
task: _testing
methods: {methods}
grid:
  n: [1]
settings:
  timeout_s: {timeout}
{extra}"""


def make_suite(tmp_path, methods=("sinusoidal",), timeout=60, extra="") -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(SUITE.format(methods=json.dumps(list(methods)), timeout=timeout, extra=extra))
    return path


def run_args(tmp_path, *more) -> list[str]:
    return ["--suite", str(tmp_path / "t.yaml"), "--device", "cpu", "--results", str(tmp_path / "res"),
            "--quiet", "--run-id", "r", *more]


def test_workers_do_not_import_from_the_current_folder(tmp_path, monkeypatch):
    cwd = tmp_path / "here"
    (cwd / "posbench").mkdir(parents=True)
    marker = tmp_path / "imported"
    plant = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\nraise SystemExit(7)\n"
    (cwd / "pydantic.py").write_text(plant)  # the worker imports pydantic (task settings)
    (cwd / "posbench" / "__init__.py").write_text(plant)
    make_suite(tmp_path)
    monkeypatch.chdir(cwd)
    suite = suitemod.resolve(suitemod.load(tmp_path / "t.yaml"), "default")
    result = runner.run_suite(suite, "cpu", tmp_path / "res", progress=False)
    assert [r["status"] for r in result.rows] == ["ok"], result.rows[0]["message"]
    assert not marker.exists()


# ---------------------------------------------------------------- faults during a run


def test_second_runner_gets_one_line_naming_the_holder(tmp_path, capsys):
    make_suite(tmp_path)
    run_dir = tmp_path / "res" / "t" / "r"
    run_dir.mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from posbench.run.runner import lock_run_dir; "
         "lock_run_dir(Path(sys.argv[1])); print('locked', flush=True); time.sleep(120)", str(run_dir)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert cli.main(run_args(tmp_path)) == cli.EXIT_USAGE
        err = capsys.readouterr().err
        assert err == (f"RunLocked: {run_dir}: the run folder is in use by process {holder.pid} (another bench.py); "
                       "allowed: wait for it to finish, or pick another --run-id\n")
        assert not (run_dir / "cases.jsonl").exists()  # the second process ran nothing
    finally:
        holder.kill()
        holder.wait()
    assert cli.main(run_args(tmp_path)) == 0  # the lock went with its holder
    assert (run_dir / ".lock").read_text().strip() == str(os.getpid())


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie is dead
    except OSError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")
def test_worker_dies_with_a_killed_runner_and_its_temp_dir_is_cleaned(tmp_path):
    make_suite(tmp_path, extra="  behaviour: sleep\n  sleep_s: 60\n")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code = ("import sys; from pathlib import Path; from posbench import runner, suite as s; "
            "su = s.resolve(s.load(sys.argv[1]), 'default'); "
            "runner.run_suite(su, 'cpu', Path(sys.argv[2]), progress=False)")
    bench = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "t.yaml"), str(tmp_path / "res")],
                             env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp)})
    try:
        deadline = time.time() + 60
        workers = []
        while not workers and time.time() < deadline:
            time.sleep(0.2)
            workers = _children(bench.pid)
        assert workers, "the runner started no worker"
        stale = list(tmp.glob(f"posbench-{bench.pid}-*"))
        assert stale  # the worker's temp folder, named for its runner
        bench.kill()  # kill -9: no cleanup code runs in the runner
        bench.wait()
        deadline = time.time() + 10
        while not all(_gone(w) for w in workers) and time.time() < deadline:
            time.sleep(0.1)
        assert all(_gone(w) for w in workers), "the worker outlived its runner"
    finally:
        bench.kill()
    live = tmp / f"posbench-{os.getpid()}-keep"
    live.mkdir()
    assert runner.clean_stale_temp_dirs(str(tmp)) == stale
    assert not any(p.exists() for p in stale) and live.exists()  # a live runner's folder stays


def test_empty_or_binary_env_json_is_rewritten(tmp_path, capsys):
    make_suite(tmp_path)
    run_dir = tmp_path / "res" / "t" / "r"
    run_dir.mkdir(parents=True)
    for content in (b"", b"\xff\xfe\x00"):
        (run_dir / "env.json").write_bytes(content)
        assert cli.main(run_args(tmp_path)) == 0
        assert json.loads((run_dir / "env.json").read_text())["posbench_version"]
    leftovers = [p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []  # the atomic write left no temp file


def test_env_json_write_failure_is_one_line(tmp_path, capsys):
    make_suite(tmp_path)
    run_dir = tmp_path / "res" / "t" / "r"
    (run_dir / "env.json").mkdir(parents=True)  # writing a file there fails with a real OSError
    assert cli.main(run_args(tmp_path)) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err == f"WriteError: cannot write {run_dir}/env.json: Is a directory\n"


def test_table_write_failure_keeps_the_rows(tmp_path, capsys):
    make_suite(tmp_path)
    path = tmp_path / "t.yaml"
    path.write_text(path.read_text().replace("grid:", "metrics: [value]\ngrid:"))  # a suite with a table
    run_dir = tmp_path / "res" / "t" / "r"
    (run_dir / "table.md").mkdir(parents=True)
    assert cli.main(run_args(tmp_path)) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"WriteError: cannot write {run_dir}/table.md: Is a directory; the rows are saved")
    assert err.count("\n") == 1
    assert [r["status"] for r in runner.read_usable_rows(run_dir / "cases.jsonl")] == ["ok"]


def test_a_failed_row_write_loses_no_earlier_row_and_names_the_case(tmp_path, capsys, monkeypatch):
    make_suite(tmp_path, methods=("sinusoidal", "rotary", "alibi"))
    real, calls = runner.append_row, []

    def disk_full_after_one(path, row):
        calls.append(row["case_id"])
        if len(calls) > 1:
            raise OSError(28, "No space left on device", str(path))
        real(path, row)

    monkeypatch.setattr(runner, "append_row", disk_full_after_one)
    monkeypatch.setattr(runner.save_row, "__defaults__", ((0.01, 0.01),))
    assert cli.main(run_args(tmp_path)) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    run_dir = tmp_path / "res" / "t" / "r"
    assert err == (f"RowNotSaved: cannot write {run_dir}/cases.jsonl: No space left on device; case rotary/n=1 "
                   "finished but its row is not saved: fix the folder, then re-run the same command "
                   "(it resumes and runs that case again)\n")
    assert calls == ["sinusoidal/n=1"] + ["rotary/n=1"] * 3  # retried, and the run stopped there
    monkeypatch.setattr(runner, "append_row", real)
    assert cli.main(run_args(tmp_path)) == 0
    assert [r["case_id"] for r in runner.read_usable_rows(run_dir / "cases.jsonl")] == [
        "sinusoidal/n=1", "rotary/n=1", "alibi/n=1"]


def test_a_row_write_that_fails_once_is_retried(tmp_path, monkeypatch):
    real, fails = runner.append_row, [OSError(5, "Input/output error")]

    def flaky(path, row):
        if fails:
            raise fails.pop()
        real(path, row)

    monkeypatch.setattr(runner, "append_row", flaky)
    row = {"case_id": "a", "status": "ok", "method": "m", "params": {}, "metrics": {}}
    runner.save_row(tmp_path / "cases.jsonl", row, retries=(0.01,))
    assert runner.read_usable_rows(tmp_path / "cases.jsonl") == [row]


def test_corrupt_rows_are_skipped_and_reported_with_file_and_line(tmp_path, capsys):
    make_suite(tmp_path, methods=("sinusoidal", "rotary"))
    run_dir = tmp_path / "res" / "t" / "r"
    run_dir.mkdir(parents=True)
    assert cli.main(run_args(tmp_path, "--methods", "sinusoidal")) == 0
    path = run_dir / "cases.jsonl"
    good = path.read_bytes()
    path.write_bytes(good + b"{}\n[1, 2]\n" + b'{"case_id": null, "status": "ok"}\n' + b"\xff\xfe{}\n"
                     + b"not json\n" + b'{"case_id": "x", "sta')  # the last one torn: silently ignored
    problems = []
    rows = runner.read_usable_rows(path, problems)
    assert [r["case_id"] for r in rows] == ["sinusoidal/n=1"]
    expected = {2: "row has no 'case_id'", 3: "expected a JSON object per line, got list",
                4: "case_id: expected a string, got NoneType", 5: "not UTF-8 text", 6: "not JSON (Expecting value)"}
    assert len(problems) == len(expected)
    for problem, (n, what) in zip(problems, expected.items()):
        assert problem.startswith(f"{path}:{n}: {what}") and problem.endswith("; line skipped"), problem
    capsys.readouterr()
    assert cli.main(run_args(tmp_path)) == 0  # resume: skips them, runs what is missing
    captured = capsys.readouterr()
    assert f"warning: {path}:3: expected a JSON object per line, got list; line skipped" in captured.err
    assert "1 case(s) run, 1 already done" in captured.out
    assert "Traceback" not in captured.err


def test_memory_limit_too_small_is_oom_and_names_the_limit(tmp_path):
    from posbench.core.registry import RegistryError
    from posbench.run.worker import classify, failure

    try:
        try:
            raise MemoryError()
        except MemoryError:
            raise RegistryError("error importing method file methods/rotary.py: MemoryError")
    except RegistryError as exc:
        assert classify(exc) == "oom"
        assert failure(exc, 150)["message"] == ("out of memory under memory_limit_mb 150 (MemoryError); "
                                                "allowed: a larger memory_limit_mb, or none")
    path = write(tmp_path, efficiency_suite("  memory_limit_mb: 150\n  warmup_steps: 0\n  measure_steps: 1\n"
                                            "  windows: 1\n", grid="[16]").replace("[sinusoidal, alibi]",
                                                                                   "[sinusoidal]"))
    suite = suitemod.resolve(suitemod.load(path), "default")
    (row,) = runner.run_suite(suite, "cpu", tmp_path / "res", progress=False).rows
    assert row["status"] == "oom"
    assert row["message"].startswith("out of memory under memory_limit_mb 150")
    assert "methods/" not in row["message"]


# ---------------------------------------------------------------- bench.py: one line, --debug


def test_no_traceback_for_bad_input_and_debug_shows_one(tmp_path, capsys):
    make_suite(tmp_path)
    results = tmp_path / "file"
    results.write_text("not a folder")
    args = ["--suite", str(tmp_path / "t.yaml"), "--device", "cpu", "--results", str(results), "--quiet"]
    assert cli.main(args) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"WriteError: cannot create {results}/t/") and "Traceback" not in err
    assert cli.main(args + ["--debug"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.splitlines()[-1].startswith("WriteError: cannot create")


def test_bench_py_process_exit_code_and_one_line(tmp_path):
    bad = write(tmp_path, VALID + "x: &a [*a]\n")
    proc = subprocess.run([sys.executable, str(REPO / "bench.py"), "validate", str(bad)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "an alias refers to a node that contains it" in proc.stderr


# ---------------------------------------------------------------- download


from tests.helpers.archives import wikitext_zip_bytes  # noqa: E402  (served by the `server` fixture, tests/conftest.py)


def test_download_into_a_file_is_one_line(tmp_path, capsys):
    target = tmp_path / "data"
    target.write_text("a file")
    assert cli.main(["download", "wikitext-103", "--data", str(target)]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err == f"DataError: download: --data {target}: {target} is a file, not a folder; allowed: a folder " \
                  "(created when missing)\n"


def test_offline_download_leaves_no_empty_folder(tmp_path, capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = tmp_path / "new" / "data"
    assert cli.main(["download", "wikitext-103", "--data", str(data), "--url", f"http://127.0.0.1:{port}/w.zip"]) \
        == cli.EXIT_USAGE
    assert "cannot reach" in capsys.readouterr().err
    assert not data.exists()


def test_download_tries_mirrors_in_order(server, tmp_path, monkeypatch):
    import hashlib

    from posbench.data import download

    assert download.WIKITEXT103_MIRRORS[0] == download.WIKITEXT103_URL and len(download.WIKITEXT103_MIRRORS) > 1
    digest = hashlib.sha256(wikitext_zip_bytes()).hexdigest()
    monkeypatch.setattr(download, "WIKITEXT103_MIRRORS", (f"{server}/gone.zip", f"{server}/wikitext-103-v1.zip"))
    folder = download.download_wikitext103(tmp_path / "d", sha256=digest, quiet=True)
    assert sorted(p.name for p in folder.iterdir()) == ["wiki.test.tokens", "wiki.train.tokens", "wiki.valid.tokens"]
    # Every mirror failing: one line naming each source and why, and nothing left behind.
    with pytest.raises(download.DataError) as info:
        download.download_wikitext103(tmp_path / "e", urls=[f"{server}/gone.zip", f"{server}/wikitext-103-v1.zip"],
                                      sha256="0" * 64, quiet=True)
    msg = str(info.value)
    assert msg.startswith("download failed from every source (2): download failed: HTTP 404")
    assert "checksum mismatch" in msg and "--archive FILE" in msg and "\n" not in msg
    assert not (tmp_path / "e").exists()


def test_download_url_and_archive_from_the_command_line(server, tmp_path, capsys, monkeypatch):
    import hashlib

    from posbench.data import download

    monkeypatch.setattr(download, "WIKITEXT103_SHA256", hashlib.sha256(wikitext_zip_bytes()).hexdigest())
    monkeypatch.setattr(download.download_wikitext103, "__defaults__",
                        (None, download.WIKITEXT103_SHA256))  # the CLI uses the default checksum
    assert cli.main(["download", "wikitext-103", "--data", str(tmp_path / "a"),
                     "--url", f"{server}/wikitext-103-v1.zip"]) == 0
    assert (tmp_path / "a" / "wikitext-103" / "wiki.valid.tokens").is_file()
    archive = tmp_path / "wikitext-103-v1.zip"
    archive.write_bytes(wikitext_zip_bytes())
    assert cli.main(["download", "wikitext-103", "--data", str(tmp_path / "b"), "--archive", str(archive)]) == 0
    assert (tmp_path / "b" / "wikitext-103" / "wiki.test.tokens").is_file() and archive.exists()
    archive.write_bytes(wikitext_zip_bytes() + b"tampered")
    capsys.readouterr()
    assert cli.main(["download", "wikitext-103", "--data", str(tmp_path / "c"), "--archive", str(archive)]) \
        == cli.EXIT_USAGE
    last = capsys.readouterr().err.splitlines()[-1]  # after the progress lines
    assert last.startswith(f"DataError: download: checksum mismatch for {archive}: expected sha256")
    assert not (tmp_path / "c").exists() and archive.exists()


def test_constructor_options_read_from_source_match_the_signature():
    import inspect

    from posbench.core import registry

    for name in registry.names():
        params = inspect.signature(registry.get(name).__init__).parameters
        expected = None if any(p.kind is p.VAR_KEYWORD for p in params.values()) else \
            [p for p in params if p not in ("self", "cfg")]
        assert suitemod.constructor_options(name) == expected, name
