# Triton decides at import time whether to compile kernels or interpret them with numpy, so the
# variable must be set before any test module imports triton: the ALiBi-Triton tests then run on
# CPU tensors. A machine with a GPU can export TRITON_INTERPRET=0 to test the compiled kernels.
import http.server
import os
import signal
import threading
import traceback

os.environ.setdefault("TRITON_INTERPRET", "1")

# Under pytest-xdist every worker runs beside the others: torch's default of one OpenMP thread per
# core oversubscribes the machine, and OpenMP's spinning threads then wait on each other (a tiny
# model's 60 training steps took 65-70 s with 2 threads against 7-12 s with 1 on a loaded 2-core
# machine). One thread per worker, inherited by every process a test starts; set before torch is
# imported so its thread pool is sized once. A test that is about threads sets its own.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

# Ctrl-C is part of what the runner tests (interrupt, then resume): a task sends SIGINT to its
# runner. A shell without job control starts a background command (`make test &`, some CI agents)
# with SIGINT ignored, every child inherits that, and Python then installs no KeyboardInterrupt
# handler: those tests saw exit 0 instead of 130 (4 failures in one such run). Restore Ctrl-C.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from posbench.core.registry import TASKS_ENV_PATH  # noqa: E402
from tests.helpers import marks  # noqa: E402
from tests.helpers.archives import wikitext_zip_bytes  # noqa: E402

# The test-only task (tests/helpers/tasks/_testing/) is found as a user's task packages are: through
# POSBENCH_TASKS_PATH, which every worker and bench.py process a test starts inherits.
TEST_TASKS = str(Path(__file__).resolve().parent / "helpers" / "tasks")
if TEST_TASKS not in os.environ.get(TASKS_ENV_PATH, "").split(os.pathsep):
    os.environ[TASKS_ENV_PATH] = os.pathsep.join(filter(None, [TEST_TASKS, os.environ.get(TASKS_ENV_PATH)]))


@pytest.fixture(scope="session")
def real_data_dir():
    """The real corpus folder (CI sets POSBENCH_DATA_DIR); skipped with the reason when absent."""
    raw = os.environ.get("POSBENCH_DATA_DIR")
    if not raw or not (Path(raw) / "wikitext-2" / "valid.txt").is_file():
        pytest.skip("needs WikiText-2 in POSBENCH_DATA_DIR (a folder with wikitext-2/valid.txt)")
    return Path(raw)


@pytest.fixture(autouse=True)
def _no_busy_machine_warning(request, monkeypatch):
    """Runs started in a test process print no "machine is busy" line: tests that read stderr
    must not depend on what else the machine runs. tests/engine/test_env.py tests the warning itself."""
    if not request.module.__name__.endswith("test_env"):
        from posbench.engine import env

        monkeypatch.setattr(env, "busy_warning", lambda state: None)


@pytest.fixture
def never_here():
    """A method that is never available, registered for one test (its runs give unavailable rows)."""
    from posbench.core import registry
    from posbench.core.method import PositionMethod

    @registry.register
    class NeverHere(PositionMethod):
        name = "never_here"

        @classmethod
        def unavailable(cls, device, dtype):
            return "needs a machine that does not exist"

    yield "never_here"
    registry.unregister("never_here")


@pytest.fixture
def plugin():
    """``plugin(cls)`` registers a method class for one test and returns its name."""
    from posbench.core import registry

    added = []

    def add(cls):
        registry.register(cls)
        added.append(cls.name)
        return cls.name

    yield add
    for name in added:
        registry.unregister(name)


@pytest.fixture
def patch_task():
    """``patch_task(name, **fields)``: the registered task ``name`` with ``fields`` replaced, for one
    test and in this process only (the workers it starts read the task's own declaration)."""
    import contextlib
    import dataclasses

    from posbench import tasks
    from posbench.core import registry

    with contextlib.ExitStack() as undo:

        def patch(name, **changes):
            return undo.enter_context(registry.task_replaced(dataclasses.replace(tasks.get(name), **changes)))

        yield patch


@pytest.fixture
def server(tmp_path):
    """A local HTTP server (a thread of the test process) for tmp_path/www on a random port of
    127.0.0.1, serving wikitext-103-v1.zip (tests/helpers/archives.py); yields its base URL."""
    www = tmp_path / "www"
    www.mkdir()
    (www / "wikitext-103-v1.zip").write_bytes(wikitext_zip_bytes())

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(www), **kw)

        def log_message(self, *a):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(autouse=True)
def _processes_are_marked(request, monkeypatch):
    """A test that starts a process carries the ``subprocess`` mark, so ``make test-fast`` (which
    leaves those out) stays fast and the mark stays true: an unmarked test that starts one fails,
    naming the command."""
    if request.node.get_closest_marker("subprocess") is not None:
        yield
        return
    import subprocess

    started: list[str] = []
    real_init = subprocess.Popen.__init__

    def recording_init(self, args, *rest, **kwargs):
        argv = [args] if isinstance(args, (str, bytes)) else list(args)
        # milliseconds, not seconds: git (the commit in env.json) and uname (the stdlib's platform
        # module); and whatever Triton or Inductor start while compiling (tests/helpers/marks.py)
        stack = [frame.filename for frame in traceback.extract_stack()]
        if Path(str(argv[0])).name not in ("git", "uname") and not marks.started_by_a_compiler(stack):
            started.append(str(args)[:120])
        real_init(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", recording_init)
    yield
    if started:
        pytest.fail(f"this test starts a process ({started[0]}); mark it @pytest.mark.subprocess", pytrace=False)


@pytest.fixture(autouse=True)
def _no_plugin_folder_outlives_its_test():
    """A test that runs the CLI with ``--methods-dir tmp/...`` adds that folder, and the methods it
    imported, to this process's registry; later tests compare ``bench.py list`` (read in a child)
    with the registry here, so a test's temporary plugins leave with it, and so do the tasks of
    temporary task packages. Classes registered from code (fixtures such as ``never_here``) are
    their own tests' business."""
    import tempfile

    from posbench.core import registry

    before = registry.snapshot()
    yield
    registry.forget_since(before, str(Path(tempfile.gettempdir()).resolve()))


@pytest.fixture(autouse=True)
def _subnormal_flush_outlives_no_test():
    """A test that prepares a case in this process (the worker's ``prepare``, the step profiler's
    ``main``) turns torch's subnormal flush on or off for the whole process: put back what was, so
    a later test (the bit-identity reference) computes as it would alone."""
    import sys

    from posbench.engine.env import subnormals_flushed

    was = "torch" in sys.modules and subnormals_flushed()
    yield
    if "torch" in sys.modules:
        sys.modules["torch"].set_flush_denormal(was)


def pytest_collection_modifyitems(config, items):
    """Longest modules first: `make test`'s two workers (``--dist loadscope --no-loadscope-reorder``)
    take whole modules in collection order, so a long module collected last runs alone at the end
    while the other worker idles (a WikiText training module left one worker busy for minutes after
    the rest were done). Modules that train on the real corpus go first, then those holding a
    ``slow`` test; the order within each group is the collection's."""
    ranks: dict[str, int] = {}  # module (a node id's file part) -> its group: 0, 1 or 2
    for item in items:
        here = 0 if "real_data_dir" in getattr(item, "fixturenames", ()) else 1 if item.get_closest_marker("slow") else 2
        module = item.nodeid.split("::")[0]
        ranks[module] = min(ranks.get(module, 2), here)
    items.sort(key=lambda item: ranks[item.nodeid.split("::")[0]])
