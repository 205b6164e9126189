#!/usr/bin/env python3
"""The decisions of the GPU benchmark workflow (.github/workflows/gpu-bench.yml), as a script the
tests run (tests/project/test_gpu_baseline.py) instead of logic hidden in YAML.

    venv-dir  where the Python environment lives: outside the workspace (actions/checkout cleans
              the workspace, and a .venv with it), one folder per TORCH_SPEC, pyproject.toml and
              workspace; folders unused for --prune-days are removed
    locate    the run folder under a folder, its suite and GPU model (env.json: NVML's name, else
              torch's), and the model as a name part for artifacts ("NVIDIA-H100-80GB-HBM3")
    pick      which stored artifact is the baseline: the newest unexpired one of the exact name
              baseline-<suite>-<GPU model>, from GitHub's artifact listing
    decide    compare this run with the baseline, or make it the baseline (none yet for this suite
              and GPU model, or accept_baseline), and stage the baseline the run publishes; a run
              with failed cases (error, timeout, oom, diverged) never becomes the baseline

The baseline of a suite on a GPU model moves only when there is none or when a person accepts a
run (the dispatch input accept_baseline, after an accepted slowdown such as a torch upgrade): a
run that passes does not move it, so slow drift adds up against one reference instead of
ratcheting. A run in which a case failed (what makes bench.py exit 3) is refused as a baseline: a
baseline with holes would let every later failure of those cases pass. Every run re-publishes the baseline it compared against (same files, fresh
retention), so the baseline does not expire while the workflow runs at least every 90 days.

Each subcommand prints one line saying what it decided and writes its step outputs to
$GITHUB_OUTPUT (and decide its line to $GITHUB_STEP_SUMMARY) when those are set. Bad input is one
line on stderr and exit status 2. locate and decide read run folders through posbench's own
reader, so they run with the project's Python (the venv); venv-dir and pick need only Python.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASELINE_FILE = "baseline.json"
CHECKPOINTS = "checkpoints"  # a run folder's trained models (extrapolation, retrieval): never uploaded
# A pip requirement for torch and nothing else: it reaches make and a shell, so no quotes or spaces.
_OP = r"(?:===|==|>=|<=|~=|!=|<|>)[0-9][0-9A-Za-z.*+!_-]*"
SPEC = re.compile(rf"torch{_OP}(?:,{_OP})*")
VENV_NAME = re.compile(r"venv-[0-9a-f]{16}")


class Bad(Exception):
    """Bad input: one line, exit status 2."""


def _outputs(values: dict[str, str]) -> None:
    path = os.environ.get("GITHUB_OUTPUT")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            for key, value in values.items():
                if "\n" in str(value):
                    raise Bad(f"output {key} holds a line break")
                fh.write(f"{key}={value}\n")


def _summary(line: str) -> None:
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n\n")


# -- venv-dir ------------------------------------------------------------------------------------


def makefile_torch_spec(makefile: Path) -> str:
    """The Makefile's default ``TORCH_SPEC ?= ...``: what ``make`` installs when none is given."""
    found = re.search(r"^TORCH_SPEC\s*\?=\s*(\S+)\s*$", makefile.read_text(encoding="utf-8"), flags=re.M)
    if not found:
        raise Bad(f"{makefile}: no 'TORCH_SPEC ?= ...' line")
    return found.group(1)


def torch_spec(given: str | None, makefile: Path) -> str:
    spec = (given or "").strip() or makefile_torch_spec(makefile)
    if not SPEC.fullmatch(spec):
        raise Bad(
            f"TORCH_SPEC {spec!r} is not a torch requirement; allowed: torch followed by versions, "
            "e.g. torch==2.13.0 or torch>=2.13,<2.15 (no spaces or quotes)"
        )
    return spec


def venv_key(spec: str, pyproject: bytes, workspace: str) -> str:
    """16 hex digits naming one environment: the torch spec, the dependencies (pyproject.toml) and
    the workspace the editable install points at (two runners on one machine: two folders)."""
    digest = hashlib.sha256()
    for part in (spec.encode(), pyproject, os.path.abspath(workspace).encode()):
        digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()[:16]


def venv_dir(root: Path, spec: str, pyproject: Path, workspace: str, prune_days: float, now: float | None = None) -> dict:
    key = venv_key(spec, pyproject.read_bytes(), workspace)
    chosen = root / f"venv-{key}"
    root.mkdir(parents=True, exist_ok=True)
    now = time.time() if now is None else now
    pruned = []
    for other in sorted(root.iterdir()):
        if (
            other != chosen
            and VENV_NAME.fullmatch(other.name)
            and other.is_dir()
            and not other.is_symlink()
            and now - other.stat().st_mtime > prune_days * 86400
        ):
            shutil.rmtree(other)
            pruned.append(other.name)
    if chosen.is_dir():
        os.utime(chosen)  # in use: not pruned by the next run on another spec
    return {
        "dir": str(chosen),
        "torch_spec": spec,
        "key": key,
        "reused": str(chosen.is_dir()).lower(),
        "pruned": " ".join(pruned),
    }


# -- locate --------------------------------------------------------------------------------------


def _posbench():
    """posbench's run-folder reader, from this checkout (not whichever posbench is installed)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from types import SimpleNamespace

    from posbench.cli.run_output import FAILED_STATUSES
    from posbench.report.rows import find_run_dirs, gpu_name
    from posbench.store import bounds
    from posbench.store.meta import read_env, read_run_meta
    from posbench.store.run_rows import CASES_FILE, case_rows, read_run_rows

    rows = SimpleNamespace(
        find_run_dirs=find_run_dirs,
        gpu_name=gpu_name,
        CASES_FILE=CASES_FILE,
        read_run_meta=read_run_meta,
        read_env=read_env,
        case_rows=case_rows,
        read_run_rows=read_run_rows,
        FAILED_STATUSES=FAILED_STATUSES,
    )
    return rows, bounds


def slug(model: str) -> str:
    """A GPU model as a part of an artifact name: letters, digits and dashes."""
    return re.sub(r"[^A-Za-z0-9]+", "-", model).strip("-") or "gpu"


def locate(folder: Path) -> dict:
    rows, stored = _posbench()
    try:
        runs = rows.find_run_dirs(folder)
        run = max(runs, key=lambda p: ((p / rows.CASES_FILE).stat().st_mtime, str(p)))  # the newest
        meta, env = rows.read_run_meta(run), rows.read_env(run)
    except stored.RowsError as exc:
        raise Bad(str(exc)) from None
    model = rows.gpu_name(env)
    if not model:
        raise Bad(f"{run}/env.json names no GPU model (NVML's or torch's); a GPU run is matched to its baseline by it")
    return {"run_dir": str(run), "suite": meta.suite if meta else run.parent.name, "gpu_model": model, "gpu_slug": slug(model)}


def failed_cases(run: Path) -> dict[str, int]:
    """How many cases of the run ended in each failed status (error, timeout, oom, diverged: what
    makes bench.py exit 3), one merged row per case; ``unavailable`` is no failure."""
    rows, stored = _posbench()
    try:
        merged = rows.case_rows(rows.read_run_rows(run, [])).values()
    except stored.RowsError as exc:
        raise Bad(str(exc)) from None
    statuses = [r.get("status") for r in merged]
    return {s: statuses.count(s) for s in rows.FAILED_STATUSES if s in statuses}


# -- pick ----------------------------------------------------------------------------------------


def _json_values(text: str) -> list:
    """Every JSON value in ``text``: one document, or one per line as ``gh api --jq`` prints them."""
    decoder, values, i = json.JSONDecoder(), [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            return values
        try:
            value, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise Bad(f"artifact listing: not JSON at line {exc.lineno}: {exc.msg}") from None
        values.append(value)


def _artifacts(text: str) -> list[dict]:
    out = []
    for value in _json_values(text):
        if isinstance(value, dict) and isinstance(value.get("artifacts"), list):  # a whole API page
            out += value["artifacts"]
        elif isinstance(value, list):
            out += value
        else:
            out.append(value)
    return [a for a in out if isinstance(a, dict)]


def pick(listing: str, name: str) -> dict | None:
    """The baseline artifact: the newest unexpired one named exactly ``name`` (GitHub's listing
    filters by name, but a hand-made listing may hold others), or None."""
    found = [
        a
        for a in _artifacts(listing)
        if a.get("name") == name
        and not a.get("expired")
        and isinstance(a.get("workflow_run"), dict)
        and a["workflow_run"].get("id")
    ]
    if not found:
        return None
    best = max(found, key=lambda a: (str(a.get("created_at") or ""), int(a.get("id") or 0)))
    return {
        "name": name,
        "artifact_id": str(best.get("id", "")),
        "run_id": str(best["workflow_run"]["id"]),
        "created_at": str(best.get("created_at") or ""),
        "commit": str(best["workflow_run"].get("head_sha") or ""),
    }


# -- decide --------------------------------------------------------------------------------------


def read_baseline(folder: Path) -> dict | None:
    """The baseline's record (``baseline.json``), or None when no baseline was downloaded (no
    folder); a downloaded folder without its record is bad input, not "no baseline"."""
    if not folder.is_dir():
        return None
    _, stored = _posbench()
    path = folder / BASELINE_FILE
    try:
        data = stored.read_small(path, 1 << 20)
        record = None if data is None else stored.loads(str(data, "utf-8"))
    except (stored.RowsError, stored.NotJson, UnicodeDecodeError) as exc:
        raise Bad(f"{path}: {exc}") from None
    if record is None:
        raise Bad(f"{path}: missing; a baseline artifact holds its record beside results/")
    if not isinstance(record, dict) or not all(
        isinstance(record.get(k), str) and record[k] for k in ("suite", "gpu_model", "run_id")
    ):
        raise Bad(f"{path}: expected an object with suite, gpu_model and run_id (strings)")
    return record


def decide(new_dir: Path, baseline_dir: Path, accept: bool, stage: Path, run: dict) -> dict:
    """What the report job does with this run: ``mode`` compare (judged against the baseline),
    first (no baseline yet: this run becomes it) or accept (this run replaces the baseline; the
    old one is compared with for the record, not judged) or refused (a case failed: the run does not
    become the baseline, whatever accept says, and ``failed_cases`` > 0 fails the job). Stages in
    ``stage`` the baseline the run publishes: this run (no checkpoints), or the downloaded baseline
    unchanged."""
    new = locate(new_dir)
    base = read_baseline(baseline_dir)
    where = f"{new['suite']} on {new['gpu_model']}"
    this = f"run {run['run_id']} (commit {run['commit'][:10]})"
    if base is not None and not accept:
        if base["suite"] != new["suite"]:
            raise Bad(
                f"the baseline is of suite {base['suite']}, this run of {new['suite']}; a baseline is per suite and GPU model"
            )
        if base["gpu_model"] != new["gpu_model"]:
            raise Bad(
                f"the baseline ran on {base['gpu_model']}, this run on {new['gpu_model']}: the GPU models "
                "differ; a baseline is per suite and GPU model (accept_baseline replaces it)"
            )
    if stage.exists():
        raise Bad(f"{stage}: already exists; the staged baseline needs a new folder")
    failed = failed_cases(Path(new["run_dir"]))
    out = {
        "staged": "true",
        "base": str(baseline_dir / "results"),
        "fail_on_regression": "false",
        "failed_cases": str(sum(failed.values())),
    }
    holes = (
        f"{this} has {sum(failed.values())} failed case(s) ({', '.join(f'{n} {s}' for s, n in failed.items())})" if failed else ""
    )
    if base is not None and not accept:
        shutil.copytree(baseline_dir, stage, symlinks=True)  # re-published as it is: fresh retention
        line = (
            f"Baseline for {where}: run {base['run_id']} (commit {base.get('commit', '')[:10]}, "
            f"{base.get('how', '')}). A regression beyond the threshold fails this job; to accept this run "
            "as the new baseline, run the workflow by hand with accept_baseline."
            + (f" This {holes}: this job fails." if failed else "")
        )
        return dict(out, mode="compare", compare="true", fail_on_regression="true", summary=line)
    if failed:  # never a baseline: the old one (if any) goes on, judged against as usual
        comparable = base is not None and base["gpu_model"] == new["gpu_model"] and base["suite"] == new["suite"]
        if base is not None:
            shutil.copytree(baseline_dir, stage, symlinks=True)
        kept = (
            f"The baseline for {where} stays run {base['run_id']}."
            if base is not None
            else f"No baseline for {where} is published until a run without failed cases."
        )
        line = (
            f"Not made the baseline: {holes}. {kept} This job fails; fix the cases (or re-run them "
            "with bench.py --retry-failed) and run the workflow again."
        )
        return dict(
            out,
            mode="refused",
            staged=str(base is not None).lower(),
            compare=str(comparable).lower(),
            fail_on_regression=str(comparable).lower(),
            summary=line,
        )
    run_dir = Path(new["run_dir"])
    # Checkpoints are no part of a baseline (compare reads rows; a model is gigabytes).
    shutil.copytree(
        run_dir, stage / "results" / new["suite"] / run_dir.name, symlinks=True, ignore=shutil.ignore_patterns(CHECKPOINTS)
    )
    how = (
        f"accepted by {run['actor']} (accept_baseline)"
        if accept
        else "the first run on this GPU model, or the earlier baseline expired"
    )
    record = {
        "format": 1,
        "suite": new["suite"],
        "gpu_model": new["gpu_model"],
        "gpu_slug": new["gpu_slug"],
        "run_id": run["run_id"],
        "run_url": run["run_url"],
        "commit": run["commit"],
        "how": how,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    (stage / BASELINE_FILE).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    if not accept:
        line = f"No baseline for {where} yet (none stored, or it expired): {this} becomes it."
        return dict(out, mode="first", compare="false", summary=line)
    comparable = base is not None and base["gpu_model"] == new["gpu_model"] and base["suite"] == new["suite"]
    line = f"Accepted by {run['actor']}: {this} is the new baseline for {where}" + (
        f"; the comparison with the old baseline (run {base['run_id']}) is shown, not judged." if comparable else "."
    )
    return dict(out, mode="accept", compare=str(comparable).lower(), summary=line)


# -- command line --------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpu_baseline.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("venv-dir", help="the venv folder for this TORCH_SPEC, pyproject.toml and workspace")
    v.add_argument("--root", required=True, type=Path, help="folder outside the workspace holding the venvs")
    v.add_argument(
        "--torch-spec",
        default=os.environ.get("TORCH_SPEC", ""),
        help="pip requirement for torch (default: $TORCH_SPEC, else the Makefile's)",
    )
    v.add_argument("--workspace", default=os.getcwd(), help="the checkout the editable install points at")
    v.add_argument("--pyproject", type=Path, default=ROOT / "pyproject.toml", help="the dependencies (default: ours)")
    v.add_argument("--prune-days", type=float, default=30.0, help="remove other venvs unused this long")
    lo = sub.add_parser("locate", help="run folder, suite and GPU model under FOLDER")
    lo.add_argument("folder", type=Path)
    pk = sub.add_parser("pick", help="the newest unexpired artifact named NAME in a listing")
    pk.add_argument("--listing", required=True, type=Path, help="GitHub's artifact listing (JSON, or JSON lines)")
    pk.add_argument("--name", required=True)
    d = sub.add_parser("decide", help="compare with the baseline, or make this run the baseline")
    d.add_argument("--new", required=True, type=Path, help="this run's folder (or a folder above it)")
    d.add_argument("--baseline", required=True, type=Path, help="the downloaded baseline artifact (may be missing)")
    d.add_argument("--accept", default="false", choices=["true", "false", ""], help="accept_baseline ('' = false)")
    d.add_argument("--stage", required=True, type=Path, help="new folder for the baseline this run publishes")
    d.add_argument("--run-id", default=os.environ.get("GITHUB_RUN_ID", "local"))
    d.add_argument("--run-url", default="")
    d.add_argument("--commit", default=os.environ.get("GITHUB_SHA", "unknown"))
    d.add_argument("--actor", default=os.environ.get("GITHUB_ACTOR", "someone"))
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "venv-dir":
            spec = torch_spec(args.torch_spec, ROOT / "Makefile")
            try:
                out = venv_dir(args.root, spec, args.pyproject, args.workspace, args.prune_days)
            except OSError as exc:
                raise Bad(f"{exc.filename or args.root}: {exc.strerror or exc}") from None
            line = f"venv {out['dir']} for {spec} ({'reused' if out['reused'] == 'true' else 'new'})" + (
                f"; removed unused {out['pruned']}" if out["pruned"] else ""
            )
        elif args.command == "locate":
            out = locate(args.folder)
            line = f"run {out['run_dir']}: suite {out['suite']} on {out['gpu_model']} ({out['gpu_slug']})"
        elif args.command == "pick":
            try:
                listing = args.listing.read_text(encoding="utf-8")
            except OSError as exc:
                raise Bad(f"{args.listing}: {exc.strerror or exc}") from None
            found = pick(listing, args.name)
            out = dict(found, found="true") if found else {"found": "false", "name": args.name}
            line = (
                f"baseline {args.name}: artifact {found['artifact_id']} of run {found['run_id']} ({found['created_at']})"
                if found
                else f"no baseline named {args.name} (none yet, or expired)"
            )
        else:
            run = {"run_id": args.run_id, "run_url": args.run_url, "commit": args.commit, "actor": args.actor}
            out = decide(args.new, args.baseline, args.accept == "true", args.stage, run)
            line = out["summary"]
            _summary(line)
        _outputs(out)
    except Bad as exc:
        print(f"gpu_baseline.py {args.command}: {exc}", file=sys.stderr)
        return 2
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
