"""Command line: ``python bench.py [run] --suite NAME``, ``validate``, ``schema``, ``list``.

Subcommands live in ``COMMANDS`` (name -> help, add_arguments, handler), so new ones (report,
compare, download) are one entry each. With no subcommand, ``run`` is assumed. A user's mistake
(an invalid suite, an unknown method) is one line on stderr and exit status 2, never a
traceback; Ctrl-C during a run is exit status 130 with the command that resumes it, SIGTERM the
same with 143, and either during another command one line. Method files are user code: ``list``
and ``check`` (``method_cmds``) and the names ``run``/``validate`` read from them are asked in a
child process with a time limit (``posbench.run.isolated``). Task packages are user code too: building
the parser imports none (``help_text``), and a command imports the one it needs within the same limit.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from posbench.cli import verify_cmds
from posbench.cli.help_text import corpus_suite, fill_examples
from posbench.cli.method_cmds import CHECK_STEP_S, CHECK_TIMEOUT_S, cmd_check, cmd_list, positive_seconds
from posbench.cli.run_cmd import cmd_run
from posbench.cli.run_flags import add_run_arguments, common_arguments
from posbench.cli.run_output import (  # noqa: F401 (bench.py's API)
    EXIT_CASES_FAILED,
    EXIT_CODES,
    FAILED_STATUSES,
    MESSAGE_SHOWN,
    case_line,
    check_corpora,
    failed_exit,
    print_tables,
    short_message,
    warn_short_budget,
)
from posbench.cli.run_request import load_methods_dirs, resolve
from posbench.cli.sweep_cmds import add_status_arguments, cmd_status
from posbench.core.files import WriteError
from posbench.core.outcome import PosbenchError
from posbench.run import suite as suitemod

EXIT_USAGE, EXIT_INTERRUPTED = 2, 130


def _on_sigterm() -> Callable[[], None]:
    """Make SIGTERM raise ``Terminated`` (a KeyboardInterrupt: the run ends as on Ctrl-C, the
    worker killed and the resume command printed, with status 143); returns what restores the
    previous handler. Off the main thread (signals cannot be set there) nothing changes."""
    from posbench.run.runner import Terminated

    def handler(signum, frame):
        raise Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:
        return lambda: None
    return lambda: signal.signal(signal.SIGTERM, previous)


def cmd_validate(args) -> int:
    load_methods_dirs(args)
    loaded = suitemod.load(args.suite)
    f = loaded.file
    if args.data is not None:  # as run's --data: the corpus of every profile, in DIR
        for profile in [suitemod.DEFAULT_PROFILE] + [p for p in f.profiles if p != suitemod.DEFAULT_PROFILE]:
            args.set, args.device, args.profile = [], "cpu", profile
            suite, _ = resolve(args)
            check_corpora([suite.settings.model_dump().get("corpus")])
    profiles = ", ".join(f.profiles) or "none"
    print(f"ok: {suitemod.display_path(loaded.path)}: task {f.task}, {len(f.methods)} methods, profiles: {profiles}")
    setup = [
        line
        for block in [f.launcher] + [p.launcher or {} for p in f.profiles.values()]
        for line in (block.get("setup") or [])
        if isinstance(block, dict)
    ]
    if setup:
        shown = "; ".join(map(str, setup))
        print(
            f"warning: launcher.setup runs shell commands before each launched task ({shown[:300]}); "
            "--launcher refuses them unless --allow-setup-commands is given",
            file=sys.stderr,
        )
    return 0


def cmd_schema(args) -> int:
    print(json.dumps(suitemod.schema(), indent=2))
    return 0


def _add_check(p):
    p.add_argument("method", help="a registered method name (see: bench.py list)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where to run the checks (default: cpu)")
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=None,
        metavar="SECONDS",
        help=f"time limit for all the checks (default: {CHECK_TIMEOUT_S:g}, and each check "
        f"{CHECK_STEP_S['cpu']:g} s on a CPU, times the load per CPU on a busy machine); they run in a child process",
    )
    common_arguments(p)


def _add_validate(p):
    p.add_argument("suite", help="suite name or path")
    p.add_argument(
        "--data",
        metavar="DIR",
        help="also check that DIR holds the corpus the suite reads under each profile (as run's --data; exit 2 when it does not)",
    )
    common_arguments(p)


def _add_list(p):
    p.add_argument(
        "--check", action="store_true", help="also say whether each method runs on this machine (imports torch: a few seconds)"
    )
    p.add_argument("--device", choices=["cpu", "cuda"], help="check availability on DEVICE (implies --check)")
    common_arguments(p)


# name -> (help, add_arguments, handler, examples); the examples' placeholders ({suite},
# {corpus_suite}, {run_examples}) are filled when a help is printed (``help_text.fill_examples``).
COMMANDS: dict[str, tuple[str, Callable, Callable, str]] = {
    "run": ("run a suite (the default subcommand)", add_run_arguments, cmd_run, "{run_examples}" + EXIT_CODES + "\n"),
    "validate": (
        "check a suite file without running it",
        _add_validate,
        cmd_validate,
        "examples:\n  python bench.py validate {suite}\n  python bench.py validate suites/mine.yaml\n"
        "  python bench.py validate {corpus_suite} --data ~/data\n",
    ),
    "schema": (
        "print the JSON Schema of suite files",
        lambda p: None,
        cmd_schema,
        "examples:\n  python bench.py schema > suite.schema.json\n",
    ),
    "list": (
        "list methods (with availability) and suites",
        _add_list,
        cmd_list,
        "examples:\n  python bench.py list\n  python bench.py list --check\n  python bench.py list --methods-dir ~/my_methods\n",
    ),
    "check": (
        "run the conformance checks on one method (float32 and bfloat16)",
        _add_check,
        cmd_check,
        "examples:\n  python bench.py check alibi\n  python bench.py check mine --methods-dir ~/my_methods\n"
        "exit status: 0 when no check failed, 1 when one did (or none could run here)\n",
    ),
    "verify": (verify_cmds.HELP, verify_cmds.add_arguments, verify_cmds.cmd_verify, verify_cmds.EXAMPLES),
    "status": (
        "where a run stands: a launched sweep's units (queued/running/done/failed), else the run folder's cases per status",
        add_status_arguments,
        cmd_status,
        "examples:\n  python bench.py status results/{suite}/RUN_ID\n"
        f"exit status: 0, or {EXIT_CASES_FAILED} when a case failed (--allow-failures gives 0)\n",
    ),
}


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog=prog_name(),
        description="posbench: what a position method costs and how well it extrapolates.",
        epilog="with no subcommand, 'run' is assumed:\n  python bench.py --suite {suite}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("--debug", action="store_true", help="on an error, also print its traceback (any position)")
    p.add_argument("--version", action=VersionAction, help="print posbench's version, its git commit and torch's version")
    sub = p.add_subparsers(dest="command", metavar="{" + ",".join(ALL_COMMANDS) + "}")
    for name, (help_, add, handler, examples) in COMMANDS.items():
        # No abbreviations: `validate --methods rotray` must not be read as --methods-dir.
        sp = sub.add_parser(
            name,
            help=help_,
            description=help_,
            epilog=examples,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            allow_abbrev=False,
        )
        add(sp)
        sp.set_defaults(handler=handler)
    from posbench.cli.report_cmds import add_compare_parser, add_publish_parser, add_report_parser
    from posbench.cli.reproduce_cmd import add_reproduce_parser

    for add in (add_report_parser, add_compare_parser, add_publish_parser, add_reproduce_parser):
        sp = add(sub)
        sp.set_defaults(handler=sp.get_default("func"))
    sp = sub.add_parser(
        "download",
        allow_abbrev=False,
        help="download a corpus (WikiText-103) into a data folder",
        epilog="examples:\n  python bench.py download wikitext-103 --data ~/data\n"
        "  python bench.py download wikitext-103 --data ~/data --url https://example.org/wikitext-103-v1.zip\n"
        "  python bench.py download wikitext-103 --data ~/data --archive ~/Downloads/wikitext-103-v1.zip\n"
        "a source silent for 15 s, or too slow to finish within an hour, or sending less than 64 KiB in 10 s,\n"
        "is given up (the next is tried)\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sp.add_argument("corpus", choices=["wikitext-103"])
    sp.add_argument("--data", required=True, metavar="DIR", help="data folder (creates DIR/wikitext-103/)")
    sp.add_argument(
        "--url",
        action="append",
        default=[],
        metavar="URL",
        help="download from URL instead of the built-in mirrors (repeatable; tried in order; the checksum is still checked)",
    )
    sp.add_argument("--archive", metavar="FILE", help="use a wikitext-103-v1.zip already on disk (checksum checked)")
    sp.set_defaults(handler=cmd_download)
    return p


ALL_COMMANDS = list(COMMANDS) + ["report", "compare", "publish", "reproduce", "download"]


def cmd_download(args) -> int:
    from posbench.data.corpus import DataError
    from posbench.data.download import download_wikitext103

    try:
        folder = download_wikitext103(args.data, urls=args.url, archive=args.archive)
    except DataError as exc:
        print(f"DataError: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"WikiText-103 is in {folder}; run: python bench.py --suite {corpus_suite()} --data {args.data}")
    return 0


def error_line(exc: BaseException) -> str:
    """One line for an error: its type, then what went wrong (an OSError: which file and why).
    An error a child process answered with (``isolated.UserCodeError``) keeps its own type's name."""
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror and type(exc) is not WriteError:
        text = f"{exc.filename}: {exc.strerror}"
    else:
        lines = str(exc).strip().splitlines()
        text = lines[0] if lines else ""
    text = str(text.encode("utf-8", "backslashreplace"), "utf-8")  # a non-UTF-8 argument, shown escaped
    return f"{getattr(exc, 'kind', None) or type(exc).__name__}: {text}".rstrip(": ")


def prog_name() -> str:
    """What usage lines call the program: ``posbench`` when run as the installed command, else ``bench.py``."""
    return "posbench" if Path(sys.argv[0]).name == "posbench" else "bench.py"


def version_line() -> str:
    """``posbench 0.1.0 (commit 5f96333..., clean), torch 2.13.0+cpu``: the commit where posbench runs
    from its checkout, else the installed version; torch's version read from its metadata (no import)."""
    import importlib.metadata

    from posbench import __version__
    from posbench.engine.env import provenance

    source = provenance()
    if source["git_dirty"] is None:
        where = f"installed {source['git_commit']}"
    else:
        where = f"commit {source['git_commit']}, {'uncommitted changes' if source['git_dirty'] else 'clean'}"
    try:
        torch = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch = "not installed"
    return f"posbench {__version__} ({where}), torch {torch}"


class VersionAction(argparse.Action):
    """``--version``: the line of ``version_line``, worked out only when asked (git runs then)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_line())
        parser.exit()


def not_a_command(word: str) -> str:
    """The line for ``bench.py frobnicate``: not a command, and which ones are."""
    import difflib

    shown = str(word.encode("utf-8", "backslashreplace"), "utf-8")
    close = difflib.get_close_matches(word, ALL_COMMANDS, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (
        f"{prog_name()}: {shown!r} is not a command{hint}; commands: {', '.join(ALL_COMMANDS)} (with no command, 'run' "
        "is assumed: python bench.py --suite NAME)"
    )


class Parser(argparse.ArgumentParser):
    """argparse's parser whose help fills its examples' placeholders when printed (finding a suite
    that reads a corpus imports tasks, which building the parser must not), and whose
    "unrecognized arguments" error adds "did you mean" from the options of the command being
    parsed (``command``, set by ``main``)."""

    command: str | None = None

    def format_help(self):
        self.epilog = fill_examples(self.epilog) if self.epilog else self.epilog
        return super().format_help()

    def error(self, message):
        import difflib

        if message.startswith("unrecognized arguments: ") and self.command:
            subparsers = next((a for a in self._actions if isinstance(a, argparse._SubParsersAction)), None)
            sub = subparsers.choices.get(self.command) if subparsers else None
            known = [s for a in sub._actions for s in a.option_strings if s.startswith("--")] if sub else []
            first = message.removeprefix("unrecognized arguments: ").split()[0].split("=")[0]
            close = difflib.get_close_matches(first, known, n=1) if first.startswith("--") else []
            if close:
                message += f" (did you mean {close[0]}?)"
        super().error(message)


def main(argv: list[str] | None = None) -> int:
    """Run a command. A user's mistake (an invalid suite or flag, a locked or corrupt run folder,
    a file that cannot be written) is one line on stderr and exit status 2; anything else is one
    line and status 1. ``--debug`` (anywhere on the line) adds the traceback."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    if argv and not argv[0].startswith("-") and argv[0] not in ALL_COMMANDS:
        print(not_a_command(argv[0]), file=sys.stderr)
        return EXIT_USAGE
    if not argv or (argv[0] not in ALL_COMMANDS and argv[0] not in ("-h", "--help", "--version")):
        argv = ["run"] + argv
    try:
        p = parser()
        p.command = argv[0]
        args = p.parse_args(argv)
    except BrokenPipeError:  # `--help | head -1`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    args.argv = argv[1:] if argv[:1] == ["run"] else argv  # what a launched sweep records to resubmit
    restore = _on_sigterm()  # SIGTERM ends any command as Ctrl-C does, with status 143
    try:
        code = args.handler(args)
        sys.stdout.flush()  # a closed pipe (`schema | head -1`) shows here, not at exit
        return code
    except BrokenPipeError:  # the reader stopped reading: what it read is all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except KeyboardInterrupt as exc:  # Ctrl-C (or SIGTERM) outside a run's own handling: one line
        from posbench.run.runner import Terminated

        if debug:
            traceback.print_exc()
        signum = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
        how = "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted (Ctrl-C)"
        print(f"\n{how}: bench.py {argv[0]} stopped", file=sys.stderr)
        return 128 + signum
    except (PosbenchError, OSError) as exc:  # bad input, or a file or folder the OS refused
        if debug:
            traceback.print_exc()
        print(error_line(exc), file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # a bug, not bad input: still one line unless asked for more
        if debug:
            traceback.print_exc()
        print(f"{error_line(exc)} (an internal error; run again with --debug for the traceback)", file=sys.stderr)
        return 1
    finally:
        restore()
