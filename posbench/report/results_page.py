"""Result pages for ``docs/results/``, generated from run folders so measured numbers are never
copied by hand: ``make docs-results`` rebuilds every page, and the index, from the runs published
in the repository (``results/published/``, ``bench.py publish``; ``rebuild``);
``make docs-results RUNS=...`` writes the pages of the run folders named (``write_pages``).

Runs of one suite on one machine share a page, one section per run: its summary (the verdicts and
headline lines ``bench.py report`` opens with, read off the same tables), its tables (as printed at
the end of the run), dates, commit, machine, versions, and the command that reproduces it. Bad
input is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posbench.core.files import WriteError
from posbench.report.escape import md_code, md_fence, md_text
from posbench.report.headline import case_counts, table_line, verdict_lines
from posbench.report.names import short_hash, slug
from posbench.report.page_charts import PageChart, run_charts
from posbench.report.page_folder import PageError, owned_pages, write_owned
from posbench.report.render import to_markdown
from posbench.report.rows import cpu_model, find_run_dirs, gpu_name, load_runs
from posbench.report.table import Table
from posbench.report.tabulate import run_tables
from posbench.store.bounds import RowsError, loads, open_regular, read_small
from posbench.store.meta import RUN_FILE, RunMeta, run_command
from posbench.store.published import provenance_warnings, without_machine_paths

DEFAULT_OUT = Path("docs/results")
GENERATOR = "make docs-results"
INDEX = "README.md"


@dataclass(frozen=True)
class Source:
    """A table of a published run and where a reader finds it (the page, at the run's heading)."""

    table: Table
    suite: str
    link: str
    rows: Any = field(default=None, compare=False)  # the run's rows (a DataFrame): pairs its tables do not show
    options: str = ""  # the run's method options (``RunSection.method_options``): a variant is said as one


# The index's findings: (question, answer lines) from every published table; the project's own
# questions (``posbench.cli.findings.findings``) name suites, so the page writer is handed them.
Answers = Callable[[list[Source]], list[tuple[str, list[str]]]]


def findings_markdown(answered: list[tuple[str, list[str]]]) -> str:
    """The findings as the index's opening section ("" when none were asked)."""
    if not answered:
        return ""
    lines = ["## Findings", "", "Generated from the published rows below; each line links the page holding its table.", ""]
    for question, answers in answered:
        lines += [f"**{md_text(question)}**", ""] + [f"- {answer}" for answer in answers] + [""]
    return "\n".join(lines) + "\n"


def _dumps_value(value: Any) -> str:
    """A ``--set`` value as YAML flow text that the suite loader reads back as ``value``
    (``yaml.safe_dump`` writes floats such as 1e-05 as ``1.0e-05``, which YAML 1.1 reads as a float)."""
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30, sort_keys=False).strip()
    if text.endswith("\n..."):  # a plain scalar ends its document with '...'
        text = text[: -len("\n...")].strip()
    elif text.endswith("..."):
        text = text[: -len("...")].strip()
    return text


def reconstruct_command(meta: RunMeta, ran: list[str] | None = None) -> list[str]:
    """The argv of ``python bench.py`` that reruns ``meta``'s suite with the settings and grid it
    used, for the methods its rows name (``ran``; run.json lists the suite's methods and the
    ``--methods`` extras, also where ``--methods`` picked a few of them)."""
    argv = ["python", "bench.py", "--suite", meta.suite]
    if meta.profile:
        argv += ["--profile", meta.profile]
    if meta.device:
        argv += ["--device", meta.device]
    methods = [m for m in meta.methods if ran is None or m in ran] + [m for m in ran or [] if m not in meta.methods]
    if methods:
        argv += ["--methods", ",".join(methods)]
    for key, value in meta.settings.items():
        argv += ["--set", f"{key}={_dumps_value(value)}"]
    for axis, values in meta.grid.items():
        argv += ["--set", f"grid.{axis}={_dumps_value(list(values))}"]
    return argv


def recorded_command(run_dir: Path) -> str | None:
    """``run.json``'s ``command`` (a string or an argv list), when the runner wrote one."""
    try:  # through the bounded reader: a FIFO or a huge run.json neither blocks nor fills memory
        raw = read_small(run_dir / RUN_FILE)
        data = loads(str(raw, "utf-8")) if raw is not None else None
    except (OSError, ValueError):  # RowsError and NotJson are ValueErrors
        return None
    command = data.get("command") if isinstance(data, dict) else None
    if isinstance(command, list) and command and all(isinstance(a, str) for a in command):
        return shlex.join(command)
    return command if isinstance(command, str) and command.strip() else None


def _split(command: str | None) -> list[str]:
    """A command recorded as one string, as its argv ([] for none, or unbalanced quotes)."""
    try:
        return shlex.split(command) if command else []
    except ValueError:
        return []


def without_results(command: str) -> str:
    """The recorded command less its ``--results DIR`` (a path of the machine that ran it, which a
    page does not name; the default, ``results/``, is where the rerun writes)."""
    try:
        argv = shlex.split(command) if "--results" in command else None
    except ValueError:  # unbalanced quotes: shown as recorded
        argv = None
    if argv is None:
        return command
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--results":
            skip = True
        elif not arg.startswith("--results="):
            out.append(arg)
    return shlex.join(out)


def format_command(argv: list[str]) -> str:
    """One shell command, one option per line (a backslash ends every line but the last)."""
    parts, i = [], 0
    while i < len(argv):
        if argv[i].startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            parts.append(f"{argv[i]} {shlex.quote(argv[i + 1])}")
            i += 2
        else:
            parts.append(shlex.quote(argv[i]))
            i += 1
    head = [p for p in parts if not p.startswith("--")]
    options = [p for p in parts if p.startswith("--")]
    return " \\\n    ".join([" ".join(head)] + options)


def machine_of(env: dict, device: str) -> dict[str, str]:
    """The machine lines of a page: CPU (with its thread count), GPU, software versions."""
    cpu = cpu_model(env) or "unknown CPU"
    if env.get("cpu_count"):
        cpu += f", {env['cpu_count']} logical CPUs"
    if env.get("torch_threads"):
        cpu += f" (torch threads at start: {env['torch_threads']})"
    if env.get("cpu_vendor"):  # env.json from before issue 59 has none of these
        cpu += f"; vendor {env['cpu_vendor']}"
    if env.get("cpu_capability"):
        extensions = env.get("cpu_extensions")
        flags = ", ".join(map(str, extensions)) if isinstance(extensions, list) and extensions else "none listed"
        cpu += f"; torch's CPU dispatch: {env['cpu_capability']} (flags: {flags})"
    gpu = gpu_name(env) or env.get("gpu") or "none"
    nvml = env.get("nvml")
    if isinstance(nvml, dict) and nvml.get("driver"):
        gpu += f" (driver {nvml['driver']})"
    return {
        "device": device or env.get("device") or "unknown",
        "cpu": cpu,
        "gpu": str(gpu),
        "os": str(env.get("os") or "unknown"),
        "python": str(env.get("python") or "unknown"),
        "torch": str(env.get("torch") or "unknown"),
        "cuda": str(env.get("cuda") or "none"),
        "triton": str(env.get("triton") or "unknown"),
    }


def _wall_seconds(rows) -> float | None:
    """Seconds from the first row's start to the last row's end. A paired group's rows (timed
    suites) share the group's start and each carries an equal share of its time as ``duration_s``,
    so rows with the same start and duration are one group, ending at start + share x its size; a
    case run alone ends at start + duration."""
    from collections import Counter
    from datetime import datetime

    groups: Counter = Counter()
    for start, duration in zip(rows["started_at"], rows["duration_s"]):
        try:
            begun = datetime.fromisoformat(start).timestamp()
        except (TypeError, ValueError):
            continue
        share = float(duration) if isinstance(duration, (int, float)) and duration == duration else 0.0
        groups[(begun, share)] += 1
    if not groups:
        return None
    return max(b + share * n for (b, share), n in groups.items()) - min(b for b, _share in groups)


def _busy(env: dict) -> str | None:
    machine = env.get("machine")
    if not isinstance(machine, dict):
        return None
    busy = [when for when, state in machine.items() if isinstance(state, dict) and state.get("busy")]
    return ", ".join(busy) if busy else None


class RunSection:
    """One run folder read for a page: its metadata, environment, rows' dates and commits, tables."""

    def __init__(self, run_dir: Path, find_task=None, shown: str | None = None):
        self.run_dir = run_dir
        self.shown = shown or run_dir.as_posix()  # the folder as the page names it (a repository path)
        runs = load_runs(run_dir, find_task=find_task)
        source = str(run_dir)
        self.meta = runs.metas.get(source)
        if self.meta is None:
            raise PageError(
                f"{run_dir}: no {RUN_FILE}; a results page needs the run's record "
                "(runs written before posbench kept run.json: re-run the suite)"
            )
        self.env = runs.envs.get(source, {})
        rows = self.rows = runs.rows  # the findings pair methods from them (``Source.rows``)
        self.device = self.meta.device or next((d for d in rows["device"] if isinstance(d, str) and d), "")
        self.hardware = next((h for h in rows["hardware"] if isinstance(h, str) and h), "unknown machine")
        started = sorted(s for s in rows["started_at"] if isinstance(s, str) and s)
        self.wall_s = _wall_seconds(rows)
        self.dates = (started[0], started[-1]) if started else None
        commits = [str(c) for c in rows["git_commit"] if isinstance(c, str) and c]
        self.commits = list(dict.fromkeys(commits))
        self.statuses = rows["status"].value_counts().to_dict()
        self.tables = run_tables(runs)
        self.summary = [case_counts(rows)]  # the report's summary, over these tables
        for table in self.tables:
            line = table_line(table)
            self.summary += verdict_lines(table) + ([line] if line is not None else [])
        ran = list(dict.fromkeys(m for m in rows["method"] if isinstance(m, str) and m))
        recorded = recorded_command(run_dir)  # as recorded: an argv joined, or the string run.json holds
        argv = run_command(run_dir) or _split(recorded)
        self.warnings = provenance_warnings(self.env, argv)  # shown in bold: what the repository alone cannot redo
        if without_machine_paths(argv) != argv:  # a machine's methods folder: shown as its placeholder
            recorded = shlex.join(without_machine_paths(argv))
        self.command = without_results(recorded) if recorded else format_command(reconstruct_command(self.meta, ran or None))
        self.command_recorded = recorded is not None
        self.charts: list[PageChart] = []  # drawn by the page builders, which name them (``draw_charts``)
        self.findings: list[str] = []  # the index's findings this run answers, one line per question
        # runs share a page only when they share settings, grid and methods (``group_pages``)
        self.settings_key = short_hash(
            json.dumps(
                {"settings": self.meta.settings, "grid": self.meta.grid, "methods": sorted(ran)}, sort_keys=True, default=str
            )
        )
        self.page_suffix = ""  # "-<run id>" when another page of its suite and machine holds other settings

    def draw_charts(self, page_name: str, find_task=None, answers: Answers | None = None) -> None:
        """The run's charts, named by its page and run id so no two pages or runs share a file,
        and the index's findings this run answers (its page's short summary)."""
        self.charts = run_charts(self.run_dir, self.run_dir.name, find_task)  # table keys name suite and machine
        link = self.link(page_name)
        sources = [Source(t, self.meta.suite, link, self.rows, self.method_options()) for t in self.tables]
        self.findings = [
            line.replace(f" ([table]({link}))", "").replace(f"([table]({link}))", "")
            for _question, lines in (answers(sources) if answers is not None else [])
            for line in lines
            if link in line
        ]

    def link(self, page_name: str) -> str:
        """Where a reader finds this run: its page, at its heading."""
        return f"{page_name}#run-{slug(self.meta.run_id or self.run_dir.name)}"

    def chart_files(self) -> dict[str, str | bytes]:
        """``charts/<name>.svg`` and ``.json`` of each chart -> its content (what the page links)."""
        out: dict[str, str | bytes] = {}
        for chart in self.charts:
            out[chart.svg_path], out[chart.data_path] = chart.svg, chart.data
        return out

    def wall_time(self) -> str:
        """How long the run took, first case's start to last case's end (what reproducing costs)."""
        if self.wall_s is None:
            return "unknown"
        minutes = round(self.wall_s / 60)
        return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{max(minutes, 1)} min"

    @property
    def page_name(self) -> str:
        return f"{slug(self.meta.suite)}-{slug(self.hardware)}{self.page_suffix}.md"

    def commit_line(self) -> str:
        commit = str(self.env.get("git_commit") or "unknown")
        dirty = self.env.get("git_dirty")
        text = md_code(commit) + (" (with uncommitted changes: `git_dirty` true)" if dirty else "")
        others = [c for c in self.commits if c.removesuffix("-dirty") != commit]
        if others:
            text += "; rows also name " + ", ".join(md_code(c) for c in others) + " (the run was resumed)"
        return text

    def method_options(self) -> str:
        """The options the run gave its methods' constructors (``method_options``), as
        ``irope floor_scale=8192 window=16; path_fox gate_scale=none``; "" when none: a run of
        variants is said as one wherever its numbers are quoted."""
        given = (self.meta.settings or {}).get("method_options")
        if not isinstance(given, dict):
            return ""
        parts = [
            f"{method} " + " ".join(f"{k}={v}" for k, v in sorted(options.items()))
            for method, options in sorted(given.items(), key=lambda kv: str(kv[0]))
            if isinstance(options, dict) and options
        ]
        return "; ".join(parts)

    def markdown(self) -> str:
        m, machine = self.meta, machine_of(self.env, self.device)
        if self.dates:
            first, last = self.dates
            when = first[:10] if first[:10] == last[:10] else f"{first[:10]} to {last[:10]}"
            when = md_text(f"{when} (rows started {first} to {last})")
        else:
            when = f"unknown (run.json written {md_text(m.written_at or 'at an unknown time')})"
        status = md_text(", ".join(f"{n} {s}" for s, n in sorted(self.statuses.items())))
        t = {k: md_text(v) for k, v in machine.items()}  # every text from data enters the page escaped
        version = md_text(self.env.get("posbench_version") or m.posbench_version or "unknown")
        lines = [
            f"## Run {md_code(m.run_id or self.run_dir.name)}",
            "",
            f"- **Suite**: {md_code(m.suite)} version {md_text(m.version)}, task {md_code(m.task)}, "
            f"profile {md_code(m.profile or 'default')}",
            f"- **Run folder**: {md_code(self.shown)} (cases: {status})",
            f"- **Date**: {when}",
            f"- **posbench commit**: {self.commit_line()}; posbench {version}",
            f"- **Machine**: device {md_code(machine['device'])}; CPU: {t['cpu']}; GPU: {t['gpu']}; {t['os']}",
            f"- **Software**: Python {t['python']}, torch {t['torch']}, CUDA {t['cuda']}, triton {t['triton']}",
        ]
        options = self.method_options()
        if options:
            lines.append(f"- **Method options** (not the defaults where given): {md_text(options)}")
        lines += [f"- **{warning}**" for warning in self.warnings]
        busy = _busy(self.env)
        if busy:
            lines.append(f"- **Busy machine**: env.json `machine` says other processes competed for it ({md_text(busy)})")
        if self.findings:
            lines += ["", "In short (the findings of the [index](README.md) this run answers):", ""]
            lines += [f"- {line}" for line in self.findings]
        lines += [
            "",
            "Summary (each table's learn-first verdicts, then its last column, with `Best:` only where that method's "
            "interval overlaps no other's):",
            "",
            *[f"- **{md_text(line.text)}**" if line.alarm else f"- {md_text(line.text)}" for line in self.summary],
            "",
        ]
        if self.charts:  # drawn from the same rows as the tables below; each chart's numbers beside it
            lines += ["### Charts", ""]
            lines += [
                f"![{md_text(c.title)}]({c.svg_path})\n\n*{md_text(c.title)}* ([data]({c.data_path}))\n" for c in self.charts
            ]
        lines += ["### Tables", ""]
        if self.tables:
            lines += [to_markdown(t) for t in self.tables]
        else:
            lines += ["*No tables: the run has no finished case of the suite's metrics.*", ""]
        lines += [
            "Command to reproduce"
            + (
                " (as the runner recorded it):"
                if self.command_recorded
                else " (rebuilt from run.json: every setting and grid axis as the run used it):"
            ),
            "",
            md_fence(self.command, "bash"),
            "",
        ]
        return "\n".join(lines)


def group_pages(sections: list[RunSection]) -> dict[tuple, list[RunSection]]:
    """The runs of each page: one suite on one machine, split where runs differ in settings, grid
    or methods (one page per set, each named by its first run: ``<suite>-<machine>-<run id>.md``)."""
    groups: dict[tuple, list[RunSection]] = {}
    for section in sections:
        groups.setdefault((section.meta.suite, section.hardware, section.settings_key), []).append(section)
    per_machine: dict[tuple, int] = {}
    for suite, hardware, _key in groups:
        per_machine[(suite, hardware)] = per_machine.get((suite, hardware), 0) + 1
    for (suite, hardware, _key), members in groups.items():
        if per_machine[(suite, hardware)] > 1:
            suffix = f"-{slug(members[0].meta.run_id or members[0].run_dir.name)}"
            for member in members:
                member.page_suffix = suffix
    return groups


def page_heading(suite: str, hardware: str) -> str:
    return f"# {md_text(suite)} on {md_text(hardware)}"


def page_text(sections: list[RunSection], sources: list[str], published: bool = False) -> str:
    first = sections[0]
    head = [
        page_heading(first.meta.suite, first.hardware),
        "",
        f"Generated by `{GENERATOR}` (`posbench/report/results_page.py`) from the "
        + ("published run folder(s) below (`bench.py publish`)" if published else "run folder(s) below")
        + "; do not edit by hand. Regenerate with:",
        "",
        md_fence(GENERATOR if published else f'{GENERATOR} RUNS="{" ".join(sources)}"', "bash"),
        "",
        "",
    ]
    return "\n".join(head) + "\n\n".join(s.markdown() for s in sections).rstrip() + "\n"


def write_pages(
    paths: list[str | Path], out: str | Path = DEFAULT_OUT, find_task=None, answers: Answers | None = None
) -> list[Path]:
    """Write one page per (suite, machine) of the runs at or below ``paths``; return the pages.
    ``find_task``: a task name -> its task (the CLI's registry lookup), as in ``load_runs``;
    ``answers``: the findings a page opens with (``Answers``; None: none)."""
    run_dirs: list[Path] = []
    for path in paths:
        for run_dir in find_run_dirs(path):
            if run_dir not in run_dirs:
                run_dirs.append(run_dir)
    by_machine = group_pages([RunSection(run_dir, find_task) for run_dir in run_dirs])
    out = Path(out)
    owned = owned_pages(out)  # PageError, before anything is written: a file, or files it did not write
    pages: dict[str, str | bytes] = {}
    for name, sections in _page_names(by_machine, out).items():
        for section in sections:
            section.draw_charts(name, find_task, answers)
            pages.update(section.chart_files())
        pages[name] = page_text(sections, [s.run_dir.as_posix() for s in sections])
    written = write_owned(out, pages, owned, prune=False)  # WriteError: one line
    return [p for p in written if p.suffix == ".md"]


def rebuild(  # noqa: PLR0913 -- the installation's lookups (find_task, suites, answers) beside the folders
    published: str | Path,
    out: str | Path = DEFAULT_OUT,
    find_task=None,
    shown_root: str = "",
    suites: dict[str, str] | None = None,
    answers: Answers | None = None,
) -> list[Path]:
    """Every page of ``out``, and its index (``INDEX``), from every run under ``published``, each
    named by its repository path (``shown_root`` / suite / run id: ``results/published/...``);
    the pages of ``out`` that no published run gives any more are removed, so the folder holds
    nothing but what the published rows rebuild. Only pages its manifest lists are replaced or
    removed: a folder holding any other file is refused (``page_folder``). Each page's charts go
    to ``out/charts/`` (``page_charts``); the pages' paths are returned. ``suites``: the shipped
    suites' names, each with what its file says of a page still to come ("" where nothing), so
    the index names those no published run gives a page yet."""
    published, out = Path(published), Path(out)
    owned = owned_pages(out)
    shown_root = shown_root or published.as_posix()
    by_machine = group_pages(
        [RunSection(d, find_task, f"{shown_root}/{d.relative_to(published).as_posix()}") for d in find_run_dirs(published)]
    )
    if len({sections[0].page_name for sections in by_machine.values()}) != len(by_machine):
        raise PageError(f"{published}: two machines give one page name; allowed: machines whose names differ in letters")
    pages: dict[str, str | bytes] = {}
    for key in sorted(by_machine):
        sections = by_machine[key]
        for section in sections:
            section.draw_charts(sections[0].page_name, find_task, answers)
            pages.update(section.chart_files())
        pages[sections[0].page_name] = page_text(sections, [s.shown for s in sections], published=True)
    pages[INDEX] = index_text(by_machine, shown_root, suites, answers)
    written = write_owned(out, pages, owned, prune=True)
    return [p for p in written if p.suffix == ".md"]  # the pages; their charts are under out/charts/


INDEX_TITLE = "# Measured results\n\n"
INDEX_HEAD = """## How these pages are made

Every page here is generated from runs published in the repository under `{root}/`
(`python bench.py publish results/<suite>/<run-id>` copies a run's rows, run.json and env.json
there), never written by hand. `make docs-results` rebuilds every page and this index from them,
and a test (`tests/store/test_published.py`) rebuilds each one and fails on any difference,
so every number on a page can be traced to a committed row and re-analysed.

To add a run: run the suite, `python bench.py publish results/<suite>/<run-id>`, `make
docs-results`, and commit the run's folder under `{root}/` with the pages. Runs of one suite on one
machine share a page, one section per run: suite, version, profile, run folder, dates, commit,
machine, software, the command that reproduces the run, and its tables as `bench.py report`
renders them.

Pages:

"""


def finding_sources(by_machine: dict[tuple, list[RunSection]]) -> list[Source]:
    """Every table of the published runs, with the page and run heading that hold it."""
    out = []
    for key in sorted(by_machine):
        sections = by_machine[key]
        for s in sections:
            out += [Source(t, s.meta.suite, s.link(sections[0].page_name), s.rows, s.method_options()) for t in s.tables]
    return out


def index_text(
    by_machine: dict[tuple, list[RunSection]], root: str, suites: dict[str, str] | None = None, answers: Answers | None = None
) -> str:
    """The index: the findings (``answers``), then one line per page with its runs (profile,
    date, commit, wall time: what reproducing costs), then the ``suites`` with no page yet."""
    answered = answers(finding_sources(by_machine)) if answers is not None else []
    opening = findings_markdown(answered)
    lines = [INDEX_TITLE, *([opening, "\n"] if opening else []), INDEX_HEAD.format(root=root)]
    for key in sorted(by_machine):
        sections = by_machine[key]
        first = sections[0]
        runs = "; ".join(
            f"{md_code(s.shown)} (profile {md_code(s.meta.profile or 'default')}, "
            f"{md_text(s.dates[0][:10]) if s.dates else 'undated'}, commit {md_code(str(s.env.get('git_commit') or 'unknown')[:10])}, "
            f"wall time {s.wall_time()})"
            for s in sections
        )
        other = f", settings of run {md_text(first.meta.run_id or first.run_dir.name)}" if first.page_suffix else ""
        lines.append(f"- [{md_text(first.meta.suite)} on {md_text(first.hardware)}{other}]({first.page_name}): {runs}\n")
    suites = suites or {}
    missing = sorted(set(suites) - {suite for suite, _hardware, _settings in by_machine})
    if missing:
        lines.append("\nNo published run yet (a page waits for one): ")
        lines.append(
            "; ".join(
                f"{md_code(name)} (`python bench.py --suite {name}`"
                + (f": {md_text(suites[name])}" if suites[name] else "")
                + ")"
                for name in missing
            )
            + ".\n"
        )
    return "".join(lines)


def _page_names(by_machine: dict[tuple, list[RunSection]], out: Path) -> dict[str, list[RunSection]]:
    """A file name per (suite, machine): ``<suite>-<machine slug>.md``, plus a hash of the raw names
    when two machines' slugs collide (``Acme X-1``, ``Acme X 1``) here, or the page already there
    belongs to another machine, so no machine's page overwrites another's."""
    names = {key: sections[0].page_name for key, sections in by_machine.items()}
    counts: dict[str, int] = {}
    for name in names.values():
        counts[name] = counts.get(name, 0) + 1
    pages = {}
    for key, sections in by_machine.items():
        (suite, hardware, _settings), name = key, names[key]
        if counts[name] > 1 or _page_of_another(out / name, suite, hardware):
            name = f"{name.removesuffix('.md')}-{short_hash(suite + chr(31) + hardware)}.md"
        pages[name] = sections
    return pages


def _page_of_another(path: Path, suite: str, hardware: str) -> bool:
    """Whether ``path`` is a page this module wrote for another (suite, machine): its heading says."""
    try:
        fh = open_regular(path)  # never opens a FIFO planted there
    except RowsError:
        return True
    if fh is None:
        return False
    with fh:
        first = str(fh.readline(4096), "utf-8", "replace").rstrip("\n")
    return first.startswith("# ") and first != page_heading(suite, hardware)


def main(
    argv: list[str] | None = None, find_task=None, suites: dict[str, str] | None = None, answers: Answers | None = None
) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m posbench.cli.docs_results", description="Write docs/results pages from run folders."
    )
    parser.add_argument("runs", nargs="*", metavar="RUN", help="run folders (results/<suite>/<run-id>) or folders above them")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="where the pages go (default: docs/results)")
    parser.add_argument(
        "--published", metavar="DIR", help="rebuild every page of --out, and its index, from the runs published under DIR"
    )
    args = parser.parse_args(argv)
    if not args.runs and not args.published:
        print(
            'error: no run folder given; usage: make docs-results (every page, from results/published) or make docs-results RUNS="results/<suite>/<run-id> ..."',
            file=sys.stderr,
        )
        return 2
    try:
        written = (
            rebuild(args.published, args.out, find_task, suites=suites, answers=answers)
            if args.published
            else write_pages(args.runs, args.out, find_task, answers)
        )
    except (RowsError, PageError, WriteError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0
