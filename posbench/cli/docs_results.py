"""``python -m posbench.cli.docs_results``: docs/results pages from run folders (``make docs-results``),
with the tasks of this installation (posbench/report/results_page.py writes them)."""

import sys

from posbench import tasks
from posbench.report import results_page

if __name__ == "__main__":
    sys.exit(results_page.main(find_task=tasks.find))
