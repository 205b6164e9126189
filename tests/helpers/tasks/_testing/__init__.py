"""The test-only task ``_testing``: each case does what its ``behaviour`` says, without importing
torch, so the runner's tests produce every status (ok, error, crash, timeout, oom, diverged,
interrupt) in a worker that starts in a fraction of a second.

tests/conftest.py puts tests/helpers/tasks/ on ``POSBENCH_TASKS_PATH``, so this process and every
worker and bench.py process a test starts find it as task packages are found; it is never imported
by its module path (that would import it twice: a duplicate task). A test that needs it asks
``posbench.tasks.get("_testing")``.
"""

from .task import TASK

__all__ = ["TASK"]
