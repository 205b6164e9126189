"""What ``bench.py run`` asks, from its parsed flags: the suite they name (``resolve``: ``--suite``,
``--profile``, ``--set``, ``--data``, ``--model``, ``--methods``) and the ``RunOptions`` of the
run (``run_request``), every refusal said before anything runs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from posbench.cli.help_text import tasks_reading
from posbench.cli.method_cmds import method_listing
from posbench.cli.run_flags import check_results, check_run_flags, set_log
from posbench.cli.run_output import check_corpora, warn_short_budget
from posbench.cli.sweep_cmds import pool_options
from posbench.run import suite as suitemod
from posbench.run.options import RunOptions
from posbench.run.suite import Suite, SuiteError


def run_request(args) -> tuple[Suite, RunOptions]:
    """The suite (``--methods`` joined) and the options of ``bench.py run``, after every check of
    its flags; under torchrun this process joins its ranks' group (``_under_torchrun``)."""
    from posbench.run.schedule import parse_shard, with_methods

    methods = check_run_flags(args)
    set_log(args.log)
    check_results(args.results)
    load_methods_dirs(args)
    suite, device = resolve(args)
    # the corpus said aloud before any case, for the run and its dry run alike (a gpu profile
    # without WikiText: one line naming `bench.py download`, exit 2)
    check_corpora([suite.settings.model_dump().get("corpus")])
    if args.run_id is not None:  # a folder under results/<suite>/: never a path that leaves it
        suitemod.check_name(args.run_id, "--run-id")
    if methods and "all" in methods:  # ``all``: every registered method joins this suite's run
        suite.methods = suitemod.expand_methods(suite.methods + ["all"], suite.task)
        methods = suitemod.expand_methods(methods, suite.task)
    suite = with_methods(suite, methods)  # a method the suite does not list joins this run's table
    shard = parse_shard(args.shard) if args.shard else None
    in_process = _under_torchrun(suite, device, args.dry_run)
    pooled = pool_options(args, device)  # a timed task's refusal of --parallel: pool.slots_for
    options = RunOptions(
        device=device,
        results=Path(args.results),
        run_id=args.run_id,
        fresh=args.fresh,
        retry_failed=args.retry_failed,
        unpaired=args.unpaired,
        methods=tuple(methods) if methods is not None else None,
        methods_dirs=tuple(args.methods_dir),
        progress=not args.quiet,
        shard=shard,
        in_process=in_process,
        command=["python", "bench.py", *args.argv],
        launcher=args.launcher,
        allow_setup=args.allow_setup_commands,
        **pooled,
    )
    return suite, options


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
                f"allowed with: {', '.join(tasks_reading('corpus'))}"
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
        raise SuiteError(
            f"--model: suite {loaded.file.name!r} (task {loaded.file.task}) evaluates no pretrained "
            f"checkpoint; allowed with: {', '.join(tasks_reading('pretrained'))}"
        )
    if importlib.util.find_spec("transformers") is None:
        raise SuiteError(f"--model {spec} needs the Hugging Face extra: {EXTRA_HINT}")
    folder = folder_of(spec)
    return f"pretrained={json.dumps('hf:' + str(folder), ensure_ascii=False)}"


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
