"""``python -m posbench.cli.docs_results``: docs/results pages from run folders (``make docs-results``),
with the tasks and suites of this installation and the project's questions (``findings``) (posbench/report/results_page.py writes them; the
index names the shipped suites no published run gives a page yet)."""

import sys

from posbench import tasks
from posbench.cli import findings
from posbench.report import results_page
from posbench.run.suite import loading

if __name__ == "__main__":
    sys.exit(results_page.main(find_task=tasks.find, suites=loading.pages_waiting(), answers=findings.findings))
