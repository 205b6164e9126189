"""``bench.py verify [RUN ...]``: check posbench against the published numbers it reproduces.

Each entry of the references file (``posbench/references.yaml``; ``posbench.cli.references``) is
one line: ``pass``, ``fail`` or ``skipped`` (why), its id and what was compared. Entries about
posbench's code (ALiBi slopes, rotary frequencies) always run; entries about measured results
read the run folders given. Learn first: a claim read from a language model that did not learn at
L_train (its perplexity there far from its peers' or the bound: ``learn_first.ppl_verdicts``) does
not pass, whatever its order (``learn_first_refusals``). Exit status 0 when nothing failed, 1 when
an entry failed, 2 when the references file or a run folder cannot be read (one line).
"""

from __future__ import annotations

import argparse

HELP = "check posbench against the published numbers it reproduces (posbench/references.yaml)"
EXAMPLES = (
    "examples:\n  python bench.py verify\n  python bench.py verify results/{suite}/<run-id> results/OTHER/<run-id>\n"
    "  python bench.py verify --references my_references.yaml\n"
    "exit status: 0 when nothing failed (skipped entries say why), 1 when an entry failed, 2 on bad input\n"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "runs",
        nargs="*",
        metavar="RUN",
        help="run folders (or folders above them) whose rows the measured references are checked against",
    )
    p.add_argument(
        "--references",
        metavar="FILE",
        default=None,
        help="a references file (default: posbench/references.yaml, shipped with posbench)",
    )


def cmd_verify(args) -> int:
    from posbench.cli import references

    version, entries = references.load(args.references)
    runs = None
    if args.runs:
        from posbench import tasks
        from posbench.report.rows import load_runs

        runs = load_runs(args.runs, find_task=tasks.find)  # a skipped line is named on stderr; a missing folder is one line
    results = learn_first_refusals(entries, references.check_all(entries, runs), runs)
    width = max(len(r.id) for r in results)
    for r in results:
        print(f"{r.status:<8} {r.id:<{width}}  {r.detail}")
    counts = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "skipped")}
    source = args.references or references.DEFAULT_FILE
    print(
        f"{counts['pass']} passed, {counts['fail']} failed, {counts['skipped']} skipped "
        f"({len(results)} references, version {version} of {source})"
    )
    return 1 if counts["fail"] else 0


def learn_first_refusals(entries: list[dict], results: list, runs) -> list:
    """``results`` with each measured claim that passed on a row that did not learn at L_train
    turned into a fail naming that row: its numbers beyond L_train measure the training budget,
    not the position method. The rows a claim reads are ``references.suite_rows``'s (an
    ordering's two methods only); peers are the rows of one grid point of one run folder."""
    from posbench.cli import references
    from posbench.report.learn_first import NOT_LEARNT, PPL_RULE, not_learnt_rows

    if runs is None or runs.rows is None or runs.rows.empty:
        return results
    weak = not_learnt_rows(runs.rows.to_dict("records"))
    out = []
    for entry, result in zip(entries, results):
        rows, why = references.suite_rows(entry, runs) if result.status == "pass" and "suite" in entry else ([], "")
        named = {entry.get("better"), entry.get("worse")} if entry.get("check") == "ordering" else None
        found = [
            weak[(r["source"], r["case_id"])]
            for r in rows
            if not why and (named is None or r["method"] in named) and (r["source"], r["case_id"]) in weak
        ]
        if found:
            detail = f"{NOT_LEARNT}: {'; '.join(dict.fromkeys(found))} (learn first: {PPL_RULE}), so no claim beyond it is read"
            result = references.Result(result.id, "fail", detail)
        out.append(result)
    return out
