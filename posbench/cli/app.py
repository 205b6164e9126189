"""Command line: ``python bench.py [run] --suite NAME``, ``validate``, ``schema``, ``list``.

Subcommands live in ``COMMANDS`` (name -> help, add_arguments, handler), so new ones (report,
compare, download) are one entry each. With no subcommand, ``run`` is assumed. A user's mistake
(an invalid suite, an unknown method) is one line on stderr and exit status 2, never a
traceback; Ctrl-C during a run is exit status 130 with the command that resumes it, SIGTERM the
same with 143, and either during another command one line. Method files are user code: ``list``
and ``check`` (``method_cmds``) and the names ``run``/``validate`` read from them are asked in a
child process with a time limit (``posbench.run.isolated``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import traceback
from pathlib import Path
from typing import Callable

from posbench.cli import verify_cmds
from posbench.cli.help_text import corpus_suite, corpus_tasks, example_suite, run_examples
from posbench.cli.method_cmds import CHECK_TIMEOUT_S, cmd_check, cmd_list, method_listing, positive_seconds
from posbench.cli.run_output import (  # noqa: F401 (bench.py's API)  # noqa: F401
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
from posbench.cli.sweep_cmds import add_status_arguments, add_sweep_arguments, cmd_status, launch_sweep, pool_options
from posbench.core.files import WriteError
from posbench.core.outcome import PosbenchError
from posbench.run import suite as suitemod
from posbench.run.suite import SuiteError

EXIT_USAGE, EXIT_INTERRUPTED = 2, 130


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--methods-dir", action="append", default=[], metavar="DIR", help="also load methods from DIR/*.py (repeatable)"
    )


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", required=True, help="suite name (suites/NAME.yaml) or path to a YAML file")
    p.add_argument("--profile", help="profile of the suite (default: cpu on a CPU, gpu on CUDA)")
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda if available, else cpu")
    p.add_argument(
        "--methods",
        help="comma-separated methods to run: the suite's, or any registered one "
        "(a plugin from --methods-dir too), which joins this run and its table",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting (VALUE is YAML: 3, bfloat16, [64, 128]); grid.AXIS=[...] replaces a grid axis (repeatable)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the cases and stop")
    p.add_argument("--fresh", action="store_true", help="start a new run folder instead of resuming")
    p.add_argument("--run-id", help="run folder name under results/<suite>/ (to resume a --fresh run)")
    p.add_argument("--retry-failed", action="store_true", help="re-run cases whose last row is error or timeout")
    p.add_argument("--results", default="results", help="results root (default: results/)")
    p.add_argument(
        "--data",
        metavar="DIR",
        help="a WikiText folder: suites whose task reads a corpus (a corpus setting) use it instead of "
        "their default corpus (sets corpus={kind: wikitext, path: DIR})",
    )
    p.add_argument(
        "--model",
        metavar="hf:DIR",
        help="evaluate a Hugging Face causal LM saved in DIR instead of training one (needs posbench[hf]; "
        "docs/hf-checkpoints.md); sets pretrained=hf:DIR",
    )
    p.add_argument(
        "--shard",
        metavar="I/N",
        help="run shard I of N: case k of the suite's full case list when k %% N == I; shards share "
        "the run id, so their folders merge in 'bench.py report'",
    )
    p.add_argument(
        "--quiet",
        action="store_true",
        help="print only the final summary line (and errors, on stderr, with the count of failed "
        "cases): no progress bar, no per-case lines, no tables (table.md is still written)",
    )
    p.add_argument(
        "--allow-failures",
        action="store_true",
        help=f"exit 0 even when a case ended {'/'.join(FAILED_STATUSES)} (default: exit {EXIT_CASES_FAILED})",
    )
    add_sweep_arguments(p)
    p.add_argument(
        "--log",
        choices=["wandb", "none"],
        help="training curves: TensorBoard event files are written whenever tensorboard is installed; "
        "wandb adds a W&B run per case (needs wandb; WANDB_MODE=offline keeps it local), none "
        "writes no curves",
    )
    _common(p)


def _load_methods_dirs(args) -> None:
    """Add the --methods-dir folders, after reading every method file once in a child process
    with a time limit (``method_listing``): a file this process would import to learn its names
    (a computed name) must not hang or end the command here."""
    from posbench.core import discovery

    for folder in args.methods_dir:
        discovery.add_methods_dir(folder)
    method_listing(args.methods_dir)


def _resolve(args):
    from posbench.run.runner import detect_device

    loaded = suitemod.load(args.suite)
    if getattr(args, "data", None) is not None and not args.data.strip():
        raise SuiteError(
            "--data: empty; give a folder holding a WikiText corpus (or leave --data out for the suite's own corpus)"
        )
    if getattr(args, "data", None):
        if "corpus" not in loaded.task.Settings.model_fields:
            raise SuiteError(
                f"--data: suite {loaded.file.name!r} (task {loaded.file.task}) reads no corpus; "
                f"allowed with: {', '.join(corpus_tasks())}"
            )
        if not Path(args.data).is_dir():
            raise SuiteError(f"--data: {args.data} is not a folder; give a folder holding a WikiText corpus")
        args.set = list(args.set) + [f"corpus={{kind: wikitext, path: {json.dumps(str(Path(args.data).resolve()))}}}"]
    if getattr(args, "model", None) is not None:
        args.set = list(args.set) + [pretrained_setting(args.model, loaded)]
    device = args.device or detect_device()
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SuiteError("--device cuda: CUDA is not available here; allowed: cpu")
    profile = args.profile or suitemod.PROFILE_FOR_DEVICE[device]
    if args.profile is None and profile not in loaded.file.profiles:
        profile = suitemod.DEFAULT_PROFILE
    suite = suitemod.resolve(loaded, profile, suitemod.parse_set(args.set))
    warn_short_budget(suite.settings)
    return suite, device


def pretrained_setting(spec: str, loaded) -> str:
    """The ``--set`` of ``--model hf:DIR``, after one-line refusals: a task that evaluates no
    checkpoint, a folder that is not there (or a hub id), transformers not installed."""
    import importlib.util

    from posbench.hf.checkpoint import EXTRA_HINT, folder_of

    if "pretrained" not in loaded.task.Settings.model_fields:
        from posbench import tasks

        readers = [n for n in tasks.names() if "pretrained" in tasks.get(n).Settings.model_fields]
        raise SuiteError(
            f"--model: suite {loaded.file.name!r} (task {loaded.file.task}) evaluates no pretrained "
            f"checkpoint; allowed with: {', '.join(readers)}"
        )
    if importlib.util.find_spec("transformers") is None:
        raise SuiteError(f"--model {spec} needs the Hugging Face extra: {EXTRA_HINT}")
    folder = folder_of(spec)
    return f"pretrained={json.dumps('hf:' + str(folder))}"


def check_run_flags(args) -> list[str] | None:
    """The --methods list (None: the suite's), after refusing flags that contradict or say nothing."""
    if args.fresh and args.retry_failed:
        raise SuiteError(
            "--fresh and --retry-failed contradict each other: --fresh starts a new run folder, which "
            "has no failed cases to retry; allowed: one of them"
        )
    if args.methods is None:
        return None
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not methods:
        raise SuiteError(
            f"--methods: {args.methods!r} names no method; allowed: comma-separated method names "
            "(see: bench.py list), or leave --methods out for the suite's methods"
        )
    return methods


def set_log(choice: str | None) -> None:
    """--log: the workers read ``POSBENCH_LOG`` (``posbench.engine.tracking``); wandb must import."""
    import importlib.util

    from posbench.engine import tracking

    if choice is None:  # POSBENCH_LOG from the environment: refused up front as --log is
        try:
            tracking.check_request()
        except ValueError as exc:
            raise SuiteError(str(exc)) from None
        return
    if choice == "wandb" and importlib.util.find_spec("wandb") is None:
        raise SuiteError(
            "--log wandb: the wandb package is not installed (pip install wandb); allowed: leave --log "
            "out (TensorBoard event files are written whenever tensorboard is installed), or --log none"
        )
    os.environ[tracking.LOG_ENV] = choice


def check_results(results: str) -> None:
    """--results where TensorBoard cannot write (a path that is not UTF-8): one line, up front."""
    from posbench.engine import tracking

    try:
        tracking.check_path(results, "--results")
    except ValueError as exc:
        raise SuiteError(str(exc)) from None


def _under_torchrun(suite, device, dry_run: bool) -> bool:
    """bench.py launched by torchrun: join its process group; every case then runs on all ranks
    in-process, and ``nproc`` becomes the launched world size (so it is in the run id)."""
    from posbench.engine import distributed

    world = distributed.env_world_size()
    if world <= 1:
        return False
    if suite.settings.nproc not in (1, world) and os.environ.get("RANK", "0") == "0":
        print(
            f"note: under torchrun every case runs on its {world} ranks; the suite's nproc {suite.settings.nproc} does not apply",
            file=sys.stderr,
        )
    suite.settings = suite.settings.model_copy(update={"nproc": world})
    if not dry_run:
        distributed.init_from_env(device, timeout_s=suite.settings.timeout_s)
    return True


def cmd_run(args) -> int:
    from posbench.engine import distributed
    from posbench.run.ranks import RanksOutOfStep
    from posbench.run.runner import Interrupted, RunOptions, run_suite
    from posbench.run.schedule import default_run_id, parse_shard, plan, with_methods

    methods = check_run_flags(args)
    set_log(args.log)
    check_results(args.results)
    _load_methods_dirs(args)
    suite, device = _resolve(args)
    if args.run_id is not None:  # a folder under results/<suite>/: never a path that leaves it
        suitemod.check_name(args.run_id, "--run-id")
    if methods and "all" in methods:  # the group: every registered method joins this suite's run
        suite.methods = suitemod.expand_methods(suite.methods + ["all"], suite.task)
        methods = suitemod.expand_methods(methods, suite.task)
    suite = with_methods(suite, methods)  # a method the suite does not list joins this run's table
    shard = parse_shard(args.shard) if args.shard else None
    in_process = _under_torchrun(suite, device, args.dry_run)
    pooled = pool_options(args, device)
    if args.launcher and not args.dry_run:
        return launch_sweep(args, suite, device, methods, shard)
    if args.dry_run:
        if os.environ.get("RANK", "0") != "0":
            return 0
        run_id = args.run_id or default_run_id(suite, device)
        run_dir = Path(args.results) / suite.name / run_id
        if args.fresh:  # a new folder (named when the run starts): nothing of an old one counts
            run_dir = None
        todo, done = plan(suite, device, run_dir, args.retry_failed, methods, args.methods_dir, run_id, shard)
        check_corpora([case.settings.get("corpus") for case in todo])
        shown = f"{run_id}-<date>-<time> (new, --fresh)" if args.fresh else run_id
        print(f"suite {suite.name} ({suite.task_name}), profile {suite.profile}, device {device}, run {shown}")
        print(f"settings: {json.dumps(suite.settings.model_dump())}")
        for case in todo:
            print(f"  run   {case.id}")
        for cid, row in done.items():
            if cid not in {c.id for c in todo}:
                print(f"  done  {cid} ({row['status']})")
        if args.fresh:
            print(f"{len(todo)} case(s) to run in a new run folder under {Path(args.results) / suite.name}/ (--fresh)")
        else:
            print(f"{len(todo)} case(s) to run, {len(done)} already in {run_dir}")
        return 0

    def on_row(row, i, n):
        from tqdm import tqdm

        if not args.quiet:  # --quiet: failures are counted in one line at the end (failed_exit)
            tqdm.write(f"[{i}/{n}] " + case_line(row, suite.metrics), file=sys.stdout)

    finished = False
    try:
        options = RunOptions(
            device=device,
            results=Path(args.results),
            run_id=args.run_id,
            fresh=args.fresh,
            retry_failed=args.retry_failed,
            methods=tuple(methods) if methods is not None else None,
            methods_dirs=tuple(args.methods_dir),
            on_row=on_row,
            progress=not args.quiet,
            shard=shard,
            in_process=in_process,
            **pooled,
        )
        result = run_suite(suite, options)
        finished = True
    except RanksOutOfStep as exc:
        print(f"RanksOutOfStep: {exc}", file=sys.stderr)
        return 1
    except Interrupted as exc:
        argv = [a for a in sys.argv[1:] if a != "--fresh"]
        if "--run-id" not in argv:
            argv += ["--run-id", exc.run_id]
        how = "terminated (SIGTERM)" if exc.signum == signal.SIGTERM else "interrupted"
        print(
            f"\n{how}: {exc.done} of {exc.total} cases finished and saved in {exc.run_dir}/cases.jsonl\n"
            f"resume with: python bench.py {shlex.join(argv)}",
            file=sys.stderr,
        )
        return 128 + exc.signum
    finally:
        if in_process:
            distributed.teardown(sync=finished)
    if os.environ.get("RANK", "0") != "0":
        return 0  # rank 0 alone reports under torchrun
    summary = f"{result.ran} case(s) run, {result.skipped} already done; rows in {result.run_dir}/cases.jsonl"
    if not args.quiet:
        print(summary)
    if result.rows and suite.metrics:
        table = print_tables(
            result.run_dir, result.run_id, {r["case_id"] for r in result.rows}, suite, device, show=not args.quiet
        )
        summary += f", tables in {table}"
    if args.quiet:  # the one line --quiet keeps: last, after the tables were written
        print(summary)
    return failed_exit(result.rows, args.allow_failures)


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
    _load_methods_dirs(args)
    loaded = suitemod.load(args.suite)
    f = loaded.file
    if args.data is not None:  # as run's --data: the corpus of every profile, in DIR
        for profile in [suitemod.DEFAULT_PROFILE] + [p for p in f.profiles if p != suitemod.DEFAULT_PROFILE]:
            args.set, args.device, args.profile = [], "cpu", profile
            suite, _ = _resolve(args)
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
        default=CHECK_TIMEOUT_S,
        metavar="SECONDS",
        help=f"time limit for all the checks (default: {CHECK_TIMEOUT_S:g}); they run in a child process",
    )
    _common(p)


def _add_validate(p):
    p.add_argument("suite", help="suite name or path")
    p.add_argument(
        "--data",
        metavar="DIR",
        help="also check that DIR holds the corpus the suite reads under each profile (as run's --data; exit 2 when it does not)",
    )
    _common(p)


def _add_list(p):
    p.add_argument(
        "--check", action="store_true", help="also say whether each method runs on this machine (imports torch: a few seconds)"
    )
    p.add_argument("--device", choices=["cpu", "cuda"], help="check availability on DEVICE (implies --check)")
    _common(p)


# name -> (help, add_arguments, handler, examples); in examples, {suite} is ``example_suite()``
# and {run_examples} is ``run_examples`` of it.
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
    suite, train_suite = example_suite(), corpus_suite()  # each reads the shipped suites: once, not per command
    p = argparse.ArgumentParser(
        prog=prog_name(),
        description="posbench: what a position method costs and how well it extrapolates.",
        epilog=f"with no subcommand, 'run' is assumed:\n  python bench.py --suite {suite}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("--debug", action="store_true", help="on an error, also print its traceback (any position)")
    p.add_argument("--version", action="version", version=f"posbench {_version()}")
    sub = p.add_subparsers(dest="command", metavar="{" + ",".join(ALL_COMMANDS) + "}")
    for name, (help_, add, handler, examples) in COMMANDS.items():
        # No abbreviations: `validate --methods rotray` must not be read as --methods-dir.
        epilog = examples.replace("{run_examples}", run_examples(suite, train_suite)).replace("{suite}", suite)
        epilog = epilog.replace("{corpus_suite}", train_suite)
        sp = sub.add_parser(
            name,
            help=help_,
            description=help_,
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            allow_abbrev=False,
        )
        add(sp)
        sp.set_defaults(handler=handler)
    from posbench.cli.report_cmds import add_compare_parser, add_report_parser

    for add in (add_report_parser, add_compare_parser):
        sp = add(sub)
        sp.set_defaults(handler=sp.get_default("func"))
    sp = sub.add_parser(
        "download",
        allow_abbrev=False,
        help="download a corpus (WikiText-103) into a data folder",
        epilog="examples:\n  python bench.py download wikitext-103 --data ~/data\n"
        "  python bench.py download wikitext-103 --data ~/data --url https://example.org/wikitext-103-v1.zip\n"
        "  python bench.py download wikitext-103 --data ~/data --archive ~/Downloads/wikitext-103-v1.zip\n",
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


ALL_COMMANDS = list(COMMANDS) + ["report", "compare", "download"]


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


def _version() -> str:
    from posbench import __version__

    return __version__


def not_a_command(word: str) -> str:
    """The line for ``bench.py frobnicate``: not a command, and which ones are."""
    shown = str(word.encode("utf-8", "backslashreplace"), "utf-8")
    return (
        f"{prog_name()}: {shown!r} is not a command; commands: {', '.join(ALL_COMMANDS)} (with no command, 'run' is "
        "assumed: python bench.py --suite NAME)"
    )


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
        args = parser().parse_args(argv)
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
