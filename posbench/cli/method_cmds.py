"""Subcommands ``list`` and ``check``: what the method files say, asked in a child process.

Method files are user code (``posbench.run.isolated``): ``list`` reads their names (importing the
files whose names reading cannot see) and with ``--check``/``--device`` asks each whether it runs
here; ``check`` imports one and runs the conformance checks. Both happen in a child process with a
time limit, so a file that blocks at import or calls ``sys.exit`` is one line, not a hung or
silently ended command. ``--device cuda`` where torch has no CUDA is one line too.
"""

from __future__ import annotations

import os

from posbench.run import isolated
from posbench.run import suite as suitemod
from posbench.run.suite import SuiteError

# Outer bounds on the child (torch's import included); a method file that blocks at import is cut
# after registry.IMPORT_LIMIT_S inside it, with a line naming the file.
LIST_TIMEOUT_S = 120.0  # reading (and with --check importing) every method file
IMPORT_TIMEOUT_S = 120.0  # importing the one method ``check`` tests
CHECK_TIMEOUT_S = 600.0  # ``check``'s default --timeout: all checks in both dtypes
# One check on its tiny shapes without --timeout, on an idle machine (``check_step_s`` scales it by the
# load): the built-in methods take under 0.3 s each on an idle CPU, but torch's threads contending with
# other work made path's take over 5 s at load 5; a GPU check may first compile its GPU code. A check
# that sleeps or loops is still cut, after a minute rather than seconds.
CHECK_STEP_S = {"cpu": 60.0, "cuda": 120.0}


def require_cuda(flag: str) -> None:
    """One line when ``flag`` asks for CUDA and this torch has none (not one failure per method
    or check, each saying the same)."""
    import torch

    if not torch.cuda.is_available():
        raise SuiteError(f"{flag}: CUDA is not available here (torch {torch.__version__}, no usable GPU); allowed: --device cpu")


def method_listing(methods_dirs, device: str | None = None) -> dict:
    """``isolated.listing`` in a child: {"methods", "reasons", "broken"}."""
    return isolated.call(
        "posbench.run.isolated:listing", {"device": device}, LIST_TIMEOUT_S, methods_dirs, "reading the method files"
    )


def check_step_s(device: str) -> tuple[float, str]:
    """Each check's limit on ``device`` and how it was reached: ``CHECK_STEP_S`` times the machine's
    load per CPU where that is above 1 (the last minute's, from ``os.getloadavg``), never past
    ``CHECK_TIMEOUT_S``, the bound on all the checks."""
    base = CHECK_STEP_S.get(device, CHECK_STEP_S["cuda"])
    how = f"{base:g} s per check"
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):  # no load average on this system: the base alone
        return base, how
    cpus = os.cpu_count() or 1
    factor = max(1.0, load / cpus)
    if factor > 1.0:
        how += f" x{factor:.3g} for load {load:.1f} on {cpus} CPUs"
    return min(base * factor, CHECK_TIMEOUT_S), how


def cmd_list(args) -> int:
    device = None
    if args.check or args.device:
        from posbench.run.runner import detect_device

        device = args.device or detect_device()
        if device == "cuda":
            require_cuda("list --device cuda")
    found = method_listing(args.methods_dir, device)
    methods = found["methods"]
    width = max([14] + [len(n) for n in methods])  # rotary_dynamic_ntk is 18
    mods = found.get("modifiers") or {}  # in the header: the lines below are one method each
    modifiers = f"; modifiers, taken as METHOD+MODIFIER: {', '.join(f'{n} ({o})' for n, o in mods.items())}" if mods else ""
    recipes = found.get("recipes") or {}  # methods too, listed below: presets built from other methods
    modifiers += f"; recipes: {', '.join(recipes)}" if recipes else ""
    if device:
        print(f"methods (availability on {device}, float32{modifiers}):")
        for name, origin in methods.items():
            if name in found["broken"]:
                state = "cannot tell: " + found["broken"][name]
            else:
                reason = found["reasons"].get(name)
                state = "available" if not reason else "unavailable: " + reason
            print(f"  {name:<{width}} {state:<40} {origin}")
    else:
        print(f"methods (--check: whether each runs here{modifiers}):")
        for name, origin in methods.items():
            print(f"  {name:<{width}} {origin}")
    print("suites:")
    for name in suitemod.names():
        try:
            loaded = suitemod.load(name)
            first = loaded.file.description.split(". ")[0].rstrip(".")  # the first sentence
            print(f"  {name:<14} {first}")
        except SuiteError as exc:
            print(f"  {name:<14} INVALID: {exc}")
    return 0


def cmd_check(args) -> int:
    """Every conformance check on one method, one line each; exit 0 only when none failed."""
    from posbench.core import conformance as testing

    if args.device == "cuda":
        require_cuda("check --device cuda")
    # An unknown name: one line with "did you mean"; a file that does not import: one line.
    origin = isolated.call(
        "posbench.core.registry:load_limited",
        {"method": args.method},
        IMPORT_TIMEOUT_S,
        args.methods_dir,
        f"loading method {args.method}",
    )
    print(f"conformance of {args.method} ({origin}) on {args.device}:", flush=True)
    # --timeout given: that bound alone; else each check gets check_step_s (a method that sleeps: a minute)
    step, how = (None, "") if args.timeout else check_step_s(args.device)
    results = isolated.call(
        "posbench.run.isolated:conformance",
        {"method": args.method, "device": args.device, "step_s": step, "step_how": how},
        args.timeout or CHECK_TIMEOUT_S,
        args.methods_dir,
        f"the checks of {args.method}",
    )
    counts = {"pass": 0, "FAIL": 0, "unavailable": 0}
    for key, outcome in results.items():
        if outcome is None:
            state, why = "pass", ""
        elif outcome.startswith(testing.UNAVAILABLE):
            state, why = "unavailable", outcome.removeprefix(testing.UNAVAILABLE)
        else:
            state, why = "FAIL", outcome.removeprefix(f"{args.method}: ")
        counts[state] += 1
        print(f"  {key:<26} {state}" + (f": {why}" if why else ""))
    print(f"{counts['pass']} passed, {counts['FAIL']} failed, {counts['unavailable']} unavailable here")
    # Unavailable checks say what this machine cannot run; they fail nothing, but a method
    # with no check run at all has not been shown to work.
    return 0 if counts["FAIL"] == 0 and counts["pass"] > 0 else 1


def positive_seconds(text: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected seconds, a number > 0")
    return value
