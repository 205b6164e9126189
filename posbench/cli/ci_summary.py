"""``python -m posbench.cli.ci_summary``: the CI job summary of a report (the GPU workflow), with
the tasks of this installation (posbench/report/job_summary.py writes it)."""

import sys

from posbench import tasks
from posbench.report import job_summary

if __name__ == "__main__":
    sys.exit(job_summary.main(find_task=tasks.find))
