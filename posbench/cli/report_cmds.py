"""Subcommands ``report`` and ``compare`` for ``bench.py`` / ``posbench``: ``add_report_parser`` and
``add_compare_parser`` each add one to ``posbench/cli/app.py``'s subparsers, its ``func`` a handler
that returns the exit code.
"""

from __future__ import annotations

import argparse
import sys

# Run ids as runs name their folders (posbench.run.options.default_run_id): <profile>-<device>-
# <hash of settings and grid>, with -<YYYYmmdd>-<HHMMSS> for a --fresh run.
REPORT_EPILOG = """examples:
  bench.py report results/SUITE/cpu-cpu-3f9a1c2e
  bench.py report results/SUITE/gpu-cuda-8d04b7e1 results/SUITE/gpu-cuda-8d04b7e1-20261126-093000 --out report/
  bench.py report results/SUITE --out report/
"""
COMPARE_EPILOG = """examples:
  bench.py compare results/SUITE/gpu-cuda-8d04b7e1 results/SUITE/gpu-cuda-8d04b7e1-20261126-093000
  bench.py compare base/ new/ --threshold 0.1 --markdown compare.md

with rounds, a regression is a NEW/BASE whose whole 95% interval lies beyond the threshold;
settings that change a measurement (windows, rounds, steps, dtype, model, device, ...) must
match: differing ones are named and the comparison refused (--allow-different-settings: a warning);
a case of BASE whose method NEW did not run is "not in new", not a failure;
exit code (as run's): 0 no regression, 1 a regression or a case of BASE missing from NEW
(a method NEW ran), 2 bad input: unreadable or empty runs, runs of different suites or tasks,
runs on different GPU models (unless --allow-other-hardware) or with different settings
"""


PUBLISH_EPILOG = """examples:
  bench.py publish results/<suite>/<run-id>
  make docs-results        # then every docs/results page, rebuilt from results/published/

copies each run's rows (cases.jsonl, a sweep's rows/*.jsonl), run.json and env.json into
results/published/<suite>/<run-id>/ (no checkpoints, event files or tables; at most 4 MiB a run,
20 MiB in all); commit that folder with the pages built from it. <suite> (run.json's) and
<run-id> (the run folder's name) must be plain names (letters, digits, _ . -); a link on the
way is refused, and an earlier copy loses only its published files. A run from a tree with
uncommitted changes (env.json git_dirty) or with methods from outside the repository (an
absolute --methods-dir, or such a POSBENCH_METHODS_PATH folder) is refused unless --allow-dirty / --allow-outside-methods; its page
then says so in bold
"""


def add_publish_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``publish RUN_DIR... [--to DIR]``."""
    p = _subcommand(
        subparsers,
        "publish",
        PUBLISH_EPILOG,
        help="copy a run's rows and records into results/published/ (the docs/results pages' sources)",
        description="Copy run folders' rows, run.json and env.json into the repository, so pages and "
        "anyone else can rebuild every number from them.",
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="a run folder (results/<suite>/<run-id>)")
    p.add_argument("--to", default=None, metavar="DIR", help="where published runs live (default: results/published)")
    p.add_argument(
        "--allow-dirty", action="store_true", help="publish a run from a tree with uncommitted changes (its page says so in bold)"
    )
    p.add_argument(
        "--allow-outside-methods",
        action="store_true",
        help="publish a run whose --methods-dir or POSBENCH_METHODS_PATH lies outside the repository (its page says so in bold)",
    )
    p.set_defaults(func=main_publish)
    return p


def main_publish(args) -> int:
    """Handler of ``publish``: one line per run published; bad input (a dirty or outside-methods run
    not allowed too) is one line and exit 2."""
    from posbench.core.outcome import PosbenchError
    from posbench.store.published import PUBLISHED, publish

    for run_dir in args.run_dirs:
        try:
            dest = publish(run_dir, args.to or PUBLISHED, args.allow_dirty, args.allow_outside_methods)
        except PosbenchError as exc:  # a folder that is no run, too large, a link, unwritable
            print(f"posbench publish: {exc}", file=sys.stderr)
            return 2
        print(f"published {run_dir} -> {dest.as_posix()}")
    return 0


def main_report(args) -> int:
    """Handler of ``report``: build tables and charts, print where they went."""
    from posbench import tasks
    from posbench.report.build import build_report  # matplotlib is only imported when a report is made
    from posbench.store.bounds import RowsError

    out = args.out or "report"
    try:
        written = build_report(args.run_dirs, out, baseline=args.baseline, find_task=tasks.find)
    except RowsError as exc:
        print(f"posbench report: {exc}", file=sys.stderr)
        return 2
    tables = sum(1 for k in written if k.startswith("tables/") and k.endswith(".md"))
    charts = sum(1 for k in written if k.startswith("charts/") and k.endswith(".png"))
    print(
        f"wrote {tables} tables and {charts} charts to {out.rstrip('/') or ''}/ "  # --out report/: not report//
        f"(open {written['report.html']}; Markdown summary {written['report.md']})"
    )
    return 0


def _subcommand(subparsers, name: str, epilog: str, **texts) -> argparse.ArgumentParser:
    """A subcommand whose epilog keeps its examples' line breaks."""
    return subparsers.add_parser(name, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter, **texts)


def add_report_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``report RUN_DIR... [--out DIR] [--baseline METHOD]``."""
    p = _subcommand(
        subparsers,
        "report",
        REPORT_EPILOG,
        help="tables and charts from stored runs (no re-running)",
        description="Regenerate Markdown/CSV/LaTeX tables, PNG/SVG charts and a single-file HTML "
        "report from the rows stored in one or more run folders (merged).",
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="a run folder (with cases.jsonl) or a folder above run folders")
    p.add_argument("--out", metavar="DIR", default=None, help="where to write (default: ./report)")
    p.add_argument(
        "--baseline",
        metavar="METHOD",
        default=None,
        help="method the ratios divide by (default: each run's baseline from its run.json; sinusoidal for runs without one)",
    )
    p.set_defaults(func=main_report)
    return p


def add_compare_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``compare BASE NEW [--threshold 0.05] [--markdown FILE] [--allow-other-hardware]
    [--allow-different-settings]``."""
    p = _subcommand(
        subparsers,
        "compare",
        COMPARE_EPILOG,
        help="compare two runs metric by metric; exit 1 on a regression",
        description="Ratio NEW/BASE per case and metric; changes beyond the threshold are improvements or regressions.",
    )
    p.add_argument("base", metavar="BASE", help="run folder (or a folder above run folders) to compare against")
    p.add_argument("new", metavar="NEW", help="run folder (or a folder above run folders) to judge")
    p.add_argument("--threshold", type=float, default=0.05, help="relative change that counts (default 0.05 = 5%%)")
    p.add_argument("--markdown", metavar="FILE", default=None, help="also write the summary here")
    p.add_argument(
        "--allow-other-hardware",
        action="store_true",
        help="compare runs made on different GPU models (refused by default: exit 2), with a warning",
    )
    p.add_argument(
        "--allow-different-settings",
        action="store_true",
        help="compare runs measured with different settings (windows, rounds, steps, dtype, model, ...; "
        "refused by default: exit 2), with a warning",
    )
    p.set_defaults(func=main_compare)
    return p


def main_compare(args) -> int:
    """Handler of ``compare``; pandas is only imported when a comparison is made."""
    from posbench import tasks
    from posbench.report.compare import main_compare as compare

    return compare(args, find_task=tasks.find)
