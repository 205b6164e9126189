"""The examples in `bench.py`'s help: which shipped suite they name, read from the suite files as
data. Building the parser imports no task: its epilogs hold placeholders (``{suite}``,
``{corpus_suite}``, ``{run_examples}``) that ``fill_examples`` fills when a help is printed, and only
the examples naming a suite that reads a corpus import a task then (a shipped suite's, within the
import limit)."""

from __future__ import annotations

from posbench.cli.sweep_cmds import SWEEP_EXAMPLES
from posbench.run import suite as suitemod


def run_examples(suite: str, train_suite: str) -> str:
    """The epilog of ``run``: examples on ``suite`` (``example_suite``) and, for training cases,
    ``train_suite`` (``corpus_suite``), comments in one column."""
    lines = [
        (f"python bench.py --suite {suite}", "profile follows the device"),
        (f"python bench.py --suite {suite} --profile cpu --methods sinusoidal,alibi", ""),
        (f'python bench.py --suite {suite} --set warmup_steps=5 --set "grid.seq_len=[128, 256]"', ""),
        ("python bench.py --suite suites/mine.yaml --dry-run", "list the cases, run nothing"),
        (f"python bench.py --suite {suite} --retry-failed", "re-run error and timeout cases"),
        (f"python bench.py --suite {suite} --shard 0/2", "half the cases (machine 0 of 2)"),
        (f"python bench.py --suite {suite} --set nproc=2", "each case on 2 ranks via torchrun"),
        (f"torchrun --nproc_per_node 2 bench.py --suite {suite}", "every case on torchrun's 2 ranks"),
    ] + [(c.format(suite=suite, train_suite=train_suite), n) for c, n in SWEEP_EXAMPLES]
    return "examples:\n" + "".join(f"  {cmd:<55} # {note}\n" if note else f"  {cmd}\n" for cmd, note in lines)


def _shipped_suites():
    """(name, data) of every shipped suite file, read as data: no task imported, nothing checked."""
    for name in suitemod.names():
        try:
            data, _ = suitemod.load_yaml((suitemod.SUITES_DIR / f"{name}.yaml").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, suitemod.YamlProblem):
            continue
        if isinstance(data, dict):
            yield name, data


def example_suite() -> str:
    """The shipped suite the help examples name: the first whose settings have ``warmup_steps``
    and whose grid has ``seq_len``, so every example runs as written (``--help`` imports no task);
    ``NAME`` when no shipped suite fits."""
    for name, data in _shipped_suites():
        settings, grid = data.get("settings"), data.get("grid")
        if isinstance(settings, dict) and isinstance(grid, dict) and "warmup_steps" in settings and "seq_len" in grid:
            return name
    return "NAME"


def fill_examples(text: str) -> str:
    """``text`` (an epilog) with its placeholders filled: ``{suite}`` (``example_suite``),
    ``{corpus_suite}`` (``corpus_suite``) and ``{run_examples}`` (``run_examples`` of both)."""
    if "{" not in text:
        return text
    suite = example_suite()
    if "{run_examples}" in text or "{corpus_suite}" in text:  # only these import tasks (corpus_suite)
        train_suite = corpus_suite()
        text = text.replace("{run_examples}", run_examples(suite, train_suite)).replace("{corpus_suite}", train_suite)
    return text.replace("{suite}", suite)


def _reads(task: object, field: str) -> bool:
    """Whether task ``task`` declares setting ``field``; False for a task that cannot be imported
    (its own users are told why, in one line)."""
    from posbench import tasks
    from posbench.core.registry import RegistryError

    try:
        return isinstance(task, str) and field in getattr(tasks.get(task).Settings, "model_fields", {})
    except (KeyError, RegistryError):
        return False


def corpus_suite() -> str:
    """A shipped suite whose task reads a corpus, for the examples of ``--data`` and the download
    hint: the shipped suites' tasks imported in turn until one declares ``corpus``."""
    return next((name for name, data in _shipped_suites() if _reads(data.get("task"), "corpus")), "NAME")


def tasks_reading(field: str) -> list[str]:
    """The tasks whose ``Settings`` declare ``field`` (``corpus``, what ``--data`` sets;
    ``pretrained``, what ``--model`` sets), for the line refusing either flag: every task imported,
    each within the import limit, one that cannot be left out."""
    from posbench import tasks

    return [name for name in tasks.names() if _reads(name, field)]
