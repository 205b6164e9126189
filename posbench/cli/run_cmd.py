"""``bench.py run``: its flags, resolving the suite they name, and running it (the default command)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
from pathlib import Path

from posbench.cli.help_text import corpus_tasks
from posbench.cli.method_cmds import method_listing
from posbench.cli.run_output import (
    EXIT_CASES_FAILED,
    FAILED_STATUSES,
    case_line,
    check_corpora,
    failed_exit,
    print_tables,
    warn_short_budget,
)
from posbench.cli.sweep_cmds import add_sweep_arguments, launch_sweep, pool_options
from posbench.run import suite as suitemod
from posbench.run.suite import SuiteError


def common_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--methods-dir", action="append", default=[], metavar="DIR", help="also load methods from DIR/*.py (repeatable)"
    )


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    # required, but checked after parsing: a mistyped option (--sute) is said first, as unknown
    p.add_argument("--suite", help="suite name (suites/NAME.yaml) or path to a YAML file (required)")
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
    p.add_argument(
        "--unpaired",
        action="store_true",
        help="a method joining a finished timed run runs alone instead of re-measuring its grid points "
        "with every method; its ratios are then marked unpaired",
    )
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
    common_arguments(p)


def load_methods_dirs(args) -> None:
    """Add the --methods-dir folders, after reading every method file once in a child process
    with a time limit (``method_listing``): a file this process would import to learn its names
    (a computed name) must not hang or end the command here."""
    from posbench.core import registry

    for folder in args.methods_dir:
        registry.add_methods_dir(folder)
    method_listing(args.methods_dir)


def resolve(args):
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
        args.set = list(args.set) + [
            f"corpus={{kind: wikitext, path: {json.dumps(str(Path(args.data).resolve()), ensure_ascii=False)}}}"
        ]
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
    sets = suitemod.parse_set(args.set)
    joining = [m.strip() for m in (getattr(args, "methods", None) or "").split(",") if m.strip()]
    if "all" in joining:
        joining = suitemod.expand_methods(joining, loaded.task)
    suite = suitemod.resolve(loaded, profile, sets, joining)
    if getattr(suite.settings, "pretrained", None):
        check_pretrained(suite.settings.pretrained, sets)
        if "pretrained_L_train" in type(suite.settings).model_fields and "L_train" in suite.grid:
            align_L_train(suite, sets)
    warn_short_budget(suite.settings)
    return suite, device


# settings a checkpoint (pretrained=hf:DIR) never reads: its config.json is the model
IGNORED_BY_PRETRAINED = ("model", "model_overrides")


def align_L_train(suite, sets: dict) -> None:
    """A task that extends a checkpoint from the length it was trained at (``pretrained_L_train``,
    else config.json's) gets that length as its grid's L_train, so case ids and tables say the
    same; a ``--set grid.L_train`` that says otherwise is one line."""
    from posbench.hf.checkpoint import folder_of
    from posbench.hf.folder_check import config_length

    given = suite.settings.pretrained_L_train
    found = (given, "pretrained_L_train") if given is not None else config_length(folder_of(suite.settings.pretrained))
    if found is None:
        return  # the case says that config.json names no length (pretrained_L_train sets it)
    length, source = found
    if "grid.L_train" in sets and suite.grid["L_train"] != [length]:
        raise SuiteError(
            f"--set grid.L_train: the checkpoint is extended from L_train {length} ({source}), not "
            f"{suite.grid['L_train']}; allowed: leave grid.L_train out, or set pretrained_L_train=N"
        )
    suite.grid["L_train"] = [length]


def check_pretrained(spec: str, sets: dict) -> None:
    """What ``--model`` refuses, refused for ``--set pretrained=`` too, before any case runs: no
    transformers, a folder that is not a checkpoint (files, config.json, code of its own); and a
    ``--set`` the checkpoint would silently ignore (its config.json is the model)."""
    import importlib.util

    from posbench.hf.checkpoint import EXTRA_HINT, checked_folder

    if importlib.util.find_spec("transformers") is None:
        raise SuiteError(f"pretrained={spec} needs the Hugging Face extra: {EXTRA_HINT}")
    checked_folder(spec)
    for key in sets:
        if key.split(".")[0] in IGNORED_BY_PRETRAINED:
            raise SuiteError(
                f"--set {key}: a checkpoint ({spec}) is evaluated as its config.json describes it, so {key} would "
                "not apply; allowed: leave it out with --model (edit config.json, or use another checkpoint)"
            )


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
    return f"pretrained={json.dumps('hf:' + str(folder), ensure_ascii=False)}"


def check_run_flags(args) -> list[str] | None:
    """The --methods list (None: the suite's), after refusing flags that contradict or say nothing."""
    if args.suite is None:
        raise SuiteError("--suite is required; allowed: a suite name (bench.py list shows them) or a path to a YAML file")
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


def check_same_settings(run_dir: Path, suite, device: str) -> None:
    """Resuming ``--run-id`` with settings other than the folder's run.json records is one line
    naming them: its rows were measured under the old ones (a new run needs a new run id)."""
    from posbench.store.meta import read_run_meta

    if not run_dir.is_dir():
        return
    meta = read_run_meta(run_dir)
    if meta is None:
        return  # a run written before run.json: nothing to compare with
    now = json.loads(json.dumps({"settings": suite.settings.model_dump(), "grid": suite.grid}, default=str))
    before = {"settings": meta.settings, "grid": meta.grid}
    differ = [
        f"{block}.{key}" if block == "grid" else key
        for block in ("settings", "grid")
        for key in sorted(set(now[block]) & set(before[block]))
        if now[block][key] != before[block][key]
    ]
    if meta.device and meta.device != device:
        differ.append("device")
    if differ:
        raise SuiteError(
            f"--run-id {run_dir.name}: this command's {', '.join(differ[:6])} differ from the run folder's "
            f"(run.json); its rows were measured with the old ones; allowed: the run's own settings "
            "(bench.py status shows its command), or another --run-id (or none) for the new settings"
        )


def cmd_run(args) -> int:
    from posbench.engine import distributed
    from posbench.run.ranks import RanksOutOfStep
    from posbench.run.runner import Interrupted, RunOptions, run_suite
    from posbench.run.schedule import default_run_id, parse_shard, plan, with_methods

    methods = check_run_flags(args)
    set_log(args.log)
    check_results(args.results)
    load_methods_dirs(args)
    suite, device = resolve(args)
    if args.run_id is not None:  # a folder under results/<suite>/: never a path that leaves it
        suitemod.check_name(args.run_id, "--run-id")
    if methods and "all" in methods:  # the group: every registered method joins this suite's run
        suite.methods = suitemod.expand_methods(suite.methods + ["all"], suite.task)
        methods = suitemod.expand_methods(methods, suite.task)
    suite = with_methods(suite, methods)  # a method the suite does not list joins this run's table
    if args.run_id is not None and not args.fresh:
        check_same_settings(Path(args.results) / suite.name / args.run_id, suite, device)
    shard = parse_shard(args.shard) if args.shard else None
    in_process = _under_torchrun(suite, device, args.dry_run)
    pooled = pool_options(args, device)
    if pooled.get("parallel", 1) != 1:  # a timed task refuses it: said by --dry-run too, not only by the run
        from posbench.run import pool

        pool.cpu_slots(pooled["parallel"], suite.task.timed, suite.task_name)
    if args.launcher and not args.dry_run:
        return launch_sweep(args, suite, device, methods, shard)
    if args.dry_run:
        if os.environ.get("RANK", "0") != "0":
            return 0
        run_id = args.run_id or default_run_id(suite, device)
        run_dir = Path(args.results) / suite.name / run_id
        if args.fresh:  # a new folder (named when the run starts): nothing of an old one counts
            run_dir = None
        todo, done = plan(suite, device, run_dir, args.retry_failed, methods, args.methods_dir, run_id, shard, args.unpaired)
        check_corpora([case.settings.get("corpus") for case in todo])
        shown = f"{run_id}-<date>-<time> (new, --fresh)" if args.fresh else run_id
        print(f"suite {suite.name} ({suite.task_name}), profile {suite.profile}, device {device}, run {shown}")
        print(f"settings: {json.dumps(suite.settings.model_dump())}")
        for case in todo:  # what the task knows cannot run here, said as the run will (no worker asked)
            reason = suite.task.unavailable_reason(case) if suite.task.unavailable is not None else None
            print(f"  unavailable {case.id}: {reason}" if reason else f"  run   {case.id}")
        for cid, row in done.items():
            if cid not in {c.id for c in todo}:
                print(f"  done  {cid} ({row['status']})")
        if args.fresh:
            print(f"{len(todo)} case(s) to run in a new run folder under {Path(args.results) / suite.name}/ (--fresh)")
        else:
            print(f"{len(todo)} case(s) to run, {len(done)} already in {run_dir}")
        return 0

    unavailable_shown: set[str] = set()  # methods whose first unavailable case was printed
    hidden = [0]

    def on_row(row, i, n):
        from tqdm import tqdm

        if args.quiet:  # --quiet: failures are counted in one line at the end (failed_exit)
            return
        if row["status"] == "unavailable":  # one line per method (30 Triton cases on a CPU said once)
            if row["method"] in unavailable_shown:
                hidden[0] += 1
                return
            unavailable_shown.add(row["method"])
        tqdm.write(f"[{i}/{n}] " + case_line(row, suite.metrics), file=sys.stdout)

    finished = False
    try:
        options = RunOptions(
            device=device,
            results=Path(args.results),
            run_id=args.run_id,
            fresh=args.fresh,
            retry_failed=args.retry_failed,
            unpaired=args.unpaired,
            methods=tuple(methods) if methods is not None else None,
            methods_dirs=tuple(args.methods_dir),
            on_row=on_row,
            progress=not args.quiet,
            shard=shard,
            in_process=in_process,
            command=["python", "bench.py", *getattr(args, "argv", sys.argv[1:])],
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
        if hidden[0]:
            print(f"({hidden[0]} more unavailable case(s) of the methods above not shown; their rows are in cases.jsonl)")
        print(summary)
    if result.rows and suite.metrics:
        table = print_tables(
            result.run_dir, result.run_id, {r["case_id"] for r in result.rows}, suite, device, show=not args.quiet
        )
        summary += f", tables in {table}"
    if args.quiet:  # the one line --quiet keeps: last, after the tables were written
        print(summary)
    return failed_exit(result.rows, args.allow_failures)
