"""A CI job summary (``$GITHUB_STEP_SUMMARY``) from a report folder: the summary lines and the tables
in Markdown, and the charts named as files of the uploaded artifact.

A job summary cannot show a report's own files: ``report.md``'s image links (``charts/x.png``)
would be broken images there. So each becomes a line naming the chart and the artifact it is in.

    python -m posbench.cli.ci_summary RUN_DIR... --report report/ --artifact report-<suite>-<GPU model>
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from posbench.report.escape import md_code, md_text
from posbench.report.headline import SUMMARY_HEADING, headline, summary_markdown
from posbench.report.rows import load_runs
from posbench.report.sections import collect_sections
from posbench.store.bounds import RowsError

# The chart lines build.py writes into report.md: ``![title](charts/<stem>.png)``.
CHART_LINK = re.compile(r"^!\[(?P<title>.*)\]\((?P<path>charts/[^)\s]+)\)[ \t]*$", flags=re.M)
# GitHub cuts a step's summary at 1 MiB; what is past this is left out, saying so.
SUMMARY_LIMIT = 1_000_000


def job_summary(run_dirs, report_dir: Path, artifact: str, baseline: str | None = None, find_task=None) -> str:
    """``report.md`` of ``report_dir`` with the summary after its title and each chart link
    replaced by a line naming the chart in ``artifact``."""
    runs = load_runs(run_dirs, find_task=find_task)  # find_task: as load_runs
    text = (Path(report_dir) / "report.md").read_text(encoding="utf-8")
    head, _, rest = text.partition("\n")  # the "# posbench report: ..." title first
    # report.md holds its summary after the title; one written before it did gets it here
    held = rest.lstrip("\n").startswith(SUMMARY_HEADING)
    lines = [] if held else summary_markdown(headline(collect_sections(runs, baseline), runs.rows))
    where = f"in the artifact {md_code(artifact)}" if artifact else "in the report folder"
    body = CHART_LINK.sub(lambda m: f"*Chart {md_text(m['title'])}: {md_code(m['path'])} {where}.*", rest)
    out = "\n".join([head, "", *lines]) + body if lines else head + "\n" + body
    if len(out.encode("utf-8")) > SUMMARY_LIMIT:
        cut = str(out.encode("utf-8")[:SUMMARY_LIMIT], "utf-8", "ignore").rsplit("\n", 1)[0]  # whole lines
        out = cut + f"\n\n*Cut at {SUMMARY_LIMIT:,} bytes (a job summary's limit): the whole report is {where}.*\n"
    return out


def main(argv: list[str] | None = None, find_task=None) -> int:
    p = argparse.ArgumentParser(prog="python -m posbench.cli.ci_summary", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="the run folders the report was built from")
    p.add_argument("--report", required=True, type=Path, help="the folder bench.py report wrote (--out)")
    p.add_argument("--artifact", default="", help="the artifact the report's charts are uploaded as")
    p.add_argument("--baseline", default=None, help="as bench.py report --baseline")
    args = p.parse_args(argv)
    try:
        text = job_summary(args.runs, args.report, args.artifact, args.baseline, find_task)
    except (RowsError, OSError) as exc:
        print(f"job_summary: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0
