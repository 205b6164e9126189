"""What a run prints: the progress line of each row and the end-of-run tables (read back from the
run folder, as `bench.py report` shows them). Shared by `bench.py run` and launched sweeps."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from posbench.core.files import WriteError


def case_line(row: dict, metrics: list[str]) -> str:
    """``[3/15] alibi  seq_len=128  ok  train_wps 25.8k  eval_wps 77.8k  (4.1 s)``."""
    from posbench import tasks
    from posbench.core.task import find_metric
    from posbench.report import numbers as fmt

    params = " ".join(f"{k}={v}" for k, v in row["params"].items())
    rounds = (row.get("settings") or {}).get("rounds") or 1
    if rounds > 1:  # interleaved rounds: say which one this row is
        params += f" round {row.get('round')}/{rounds}"
    if row["status"] == "ok":
        declared = tasks.metrics_of(row.get("task", ""))
        kind = {m: getattr(find_metric(declared, m), "fmt", "plain") for m in metrics}
        # A metric the row does not hold at all is measured elsewhere (paired windows: peak
        # memory in the round-1 row): leave it out rather than print n/a.
        detail = "  ".join(f"{m} {fmt.number(row['metrics'].get(m), kind[m])}" for m in metrics if m in row["metrics"])
    else:
        detail = short_message(row["message"])
    group = row.get("job_wall")
    took = f"{row['duration_s']:.1f} s" + (f", 1/{group['cases']} of its group's time" if group else "")
    return f"{row['method']:<13} {params:<14} {row['status']:<11} {detail}  ({took})"


def group_line(row: dict) -> str | None:
    """After the last row of a paired group (``job_wall``, which ``runner.run_jobs`` hands the
    progress line, not the stored row): the group's wall time, said once (each case's line shows
    its share)."""
    group = row.get("job_wall")
    if not group or group.get("index") != group.get("cases"):
        return None
    params = " ".join(f"{k}={v}" for k, v in row["params"].items())
    return f"      {group['cases']} methods at {params} in one worker (paired windows): {group['seconds']:.1f} s"


def start_line(plan, run_dir: Path) -> str:
    """The line a run prints once planned, before its first case: what runs, how many, where."""
    cases = list(dict.fromkeys(c.id for c, _r in plan.todo))
    methods = list(dict.fromkeys(c.method for c, _r in plan.todo))
    done = len({cid for cid, _r in plan.done} - set(cases))
    rounds = f" ({len(plan.todo)} runs: a row per case and round)" if len(plan.todo) != len(cases) else ""
    shown = ", ".join(methods[:8]) + (f" and {len(methods) - 8} more" if len(methods) > 8 else "")
    what = f": {shown}" if methods else ""
    return f"{plan.suite.name}: {len(cases)} case(s) to run{rounds}{what}; {done} already done; rows go to {run_dir}/cases.jsonl"


MESSAGE_SHOWN = 300  # characters of a row's message a progress line shows


def short_message(message: str) -> str:
    """A row's message for one progress line: its first line, at most ``MESSAGE_SHOWN`` characters,
    saying when it was cut (the row keeps the whole message)."""
    text = str(message)
    first = text.splitlines()[0] if text.strip() else ""
    if len(first) <= MESSAGE_SHOWN and first == text.strip():
        return first
    return f"{first[:MESSAGE_SHOWN]}... (message cut: {len(text)} characters in the row)"


def print_tables(run_dir: Path, run_id: str, suite, device: str, show: bool = True) -> tuple[Path, list[str]]:
    """The end-of-run tables of the suite's cases, read back from the run folder (what ``bench.py
    report`` shows; also the cases of earlier narrowed runs, so the baseline is there), into
    table.md / table.csv and printed (``show`` False: only written, for ``--quiet``); table.md's
    path, and the titles of the tables where every method failed learn first (``BROKEN PROFILE:
    0 of N learnt``: they compare nothing; ``failed_exit`` exits 3 on them)."""
    from posbench import tasks
    from posbench.report.learn_first import NOTHING_LEARNT
    from posbench.report.render import to_text, write_run_files
    from posbench.report.rows import read_runs
    from posbench.report.tabulate import run_tables

    # A skipped line was already named when the run resumed: not named twice.
    runs = read_runs([run_dir], report=lambda _problem: None, find_task=tasks.find)
    tables = run_tables(runs, {case.id for case in suite.cases(device, run_id)})
    ratios = f"ratios are against `{suite.baseline}` in this run" if suite.baseline else "no baseline, no ratios"
    note = (
        f"Suite `{suite.name}` v{suite.version}, profile `{suite.profile}`, device `{device}`, "
        f"run `{run_id}`. Words are tokens; {ratios}; memory in GiB (2^30 bytes); "
        f"peak memory is {'CUDA max_memory_allocated' if device == 'cuda' else 'peak resident set'}."
    )
    if suite.settings.nproc > 1:
        note += (
            f" Data parallel on {suite.settings.nproc} ranks: words/s count all ranks' tokens over "
            "the slowest rank's time; peak memory is the largest rank's."
        )
    try:
        write_run_files(tables, run_dir, note)
    except OSError as exc:
        what = str(exc) if isinstance(exc, WriteError) else f"cannot write {run_dir}: {exc.strerror or exc}"
        raise WriteError(f"{what}; the rows are saved in cases.jsonl ('bench.py report' writes the tables again)") from None
    if show:
        print("\n" + "\n".join(to_text(t) for t in tables))
        print(f"table: {run_dir}/table.md, {run_dir}/table.csv")
        print(f"charts and the full report: python bench.py report {run_dir}")
    return run_dir / "table.md", [t.title for t in tables if NOTHING_LEARNT in t.title]


# A run whose rows and tables were written but where a case ended error/timeout/oom/diverged
# (``unavailable`` is a verdict about this machine, not a failure), or a table where no method
# learnt at L_train (BROKEN PROFILE: 0 of N learnt; it compares nothing): CI must not go green on it.
EXIT_CASES_FAILED = 3
FAILED_STATUSES = ("error", "timeout", "oom", "diverged")
EXIT_CODES = (
    "exit status: 0 every case ran (or is unavailable here), 1 an internal error, 2 bad input, "
    "3 a case ended error/timeout/oom/diverged or no method of a table learnt at L_train (BROKEN "
    "PROFILE: 0 of N learnt; rows and tables still written; --allow-failures gives 0), 130/143 interrupted (Ctrl-C/SIGTERM)"
)


def failed_exit(rows: list[dict], allow_failures: bool, broken: list[str] = ()) -> int:
    """0, or ``EXIT_CASES_FAILED`` with one line on stderr naming how many cases failed and how,
    or (none failed) the first of the ``broken`` tables' titles (``print_tables``)."""
    failed = [r for r in rows if r.get("status") in FAILED_STATUSES]
    if not failed and broken:
        more = f" (and {len(broken) - 1} more table(s))" if len(broken) > 1 else ""
        if allow_failures:
            print(f"note: {broken[0]}{more}; exit 0 (--allow-failures)", file=sys.stderr)
            return 0
        print(f"{broken[0]}{more}; exit status {EXIT_CASES_FAILED} (--allow-failures gives 0)", file=sys.stderr)
        return EXIT_CASES_FAILED
    if not failed:
        return 0
    counts = ", ".join(
        f"{sum(r['status'] == s for r in failed)} {s}" for s in FAILED_STATUSES if any(r["status"] == s for r in failed)
    )
    if allow_failures:
        print(f"note: {len(failed)} case(s) failed ({counts}); exit 0 (--allow-failures)", file=sys.stderr)
        return 0
    print(
        f"{len(failed)} case(s) failed ({counts}); exit status {EXIT_CASES_FAILED} "
        "(--allow-failures gives 0; --retry-failed re-runs error and timeout)",
        file=sys.stderr,
    )
    return EXIT_CASES_FAILED


def check_corpora(corpora) -> None:
    """Each corpus setting (a dict, or None for a task that reads none) names files that exist: a
    DataError (one line, exit 2) before anything runs, nothing read or tokenized; a corpus that
    trains on an evaluation split is said in one line."""
    from posbench.data.sources import check_source

    seen = set()
    for c in corpora:
        key = json.dumps(c, sort_keys=True)
        if isinstance(c, dict) and key not in seen:
            seen.add(key)
            note = check_source(c.get("kind", "synthetic"), path=c.get("path"), splits=c.get("splits"))
            if note:
                print(f"note: {note}", file=sys.stderr)


def warn_short_budget(settings) -> None:
    """One line when ``steps`` ends before the warm-up does: the learning rate would never peak."""
    steps, warmup = getattr(settings, "steps", None), getattr(settings, "warmup_steps", None)
    if isinstance(steps, int) and isinstance(warmup, int) and steps < warmup:
        print(
            f"warning: steps {steps} is below warmup_steps {warmup}: the learning rate never reaches lr; "
            f"set warmup_steps below {steps} (--set warmup_steps=N)",
            file=sys.stderr,
        )
