"""What a run does, in which order: the ``Plan`` (``plan_run``), made once from the suite and the
``RunOptions`` and handed on.

Per grid point, round 1 of every method, then round 2, ..., each round one method later
(``schedule``); ``jobs`` cuts that into worker processes (with ``pairing: windows`` a grid
point's cases of one round share one). Resume and ``retry_failed`` work per (case, round).
Shards split the suite's full list by unit (``posbench.run.units``).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from posbench.core.case import CaseSpec
from posbench.core.files import refuse_links
from posbench.run.options import RunOptions
from posbench.run.ranks import broadcast
from posbench.run.suite import Suite, SuiteError, check_name
from posbench.run.units import Unit, shard_cases, split
from posbench.store.bounds import RowsError
from posbench.store.meta import Join, RunMeta, read_run_meta
from posbench.store.run_rows import ROWS_DIR, latest_rounds, read_usable_run_rows

RETRYABLE = ("error", "timeout")
MAX_CASES = 100_000  # cases one suite may expand to (grid points x methods): a run of more is not a benchmark


def check_size(suite: Suite) -> int:
    """The number of cases ``suite`` expands to, counted before any is made; more than
    ``MAX_CASES`` is one line (a 1000 x 1000 grid would fill the memory first)."""
    n = len(suite.methods)
    for axis, values in suite.grid.items():
        n *= len(values)
        if n > MAX_CASES:
            raise SuiteError(
                f"suite {suite.name}: its grid and methods expand to more than {MAX_CASES:,} cases "
                f"(at axis {axis!r}); allowed: at most {MAX_CASES:,} (split the grid into suites or "
                "profiles)"
            )
    return n


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` -> (i, n) with 0 <= i < n."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise SuiteError(f"--shard: {text!r}: expected i/n, e.g. 0/2; allowed: 0 <= i < n") from None
    if not 0 <= i < n:
        raise SuiteError(f"--shard: {text!r}: shard index out of range; allowed: 0 <= i < n")
    return i, n


def with_methods(suite: Suite, methods: list[str] | None) -> Suite:
    """The suite with ``--methods`` names it does not list appended, for this run: any registered
    method (a plugin from ``--methods-dir`` or ``POSBENCH_METHODS_PATH`` too) runs in the same
    run folder and table as the suite's own. A task that compares its own variants (``METHODS``)
    takes only those. An unknown name is one line with a "did you mean"."""
    from posbench.core import registry

    extra = [m for m in dict.fromkeys(methods or []) if m not in suite.methods]
    if not extra:
        return suite
    task = suite.task
    known = list(task.METHODS) if task.own_methods else registry.names()
    for name in extra:
        if name not in known and not task.own_methods and registry.split_composed(name):
            registry.require(name)  # METHOD+MODIFIER: one line naming the part that is unknown
        elif name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SuiteError(
                f"--methods: unknown method {name!r}{hint}; allowed: the suite's methods "
                f"or any registered one: {', '.join(known)}"
            )
    return dataclasses.replace(suite, methods=suite.methods + extra)


def _select(suite: Suite, options: RunOptions, run_id: str) -> tuple[list[CaseSpec], list[CaseSpec]]:
    """(the cases to run, every case of this shard) of ``suite`` (``--methods`` joined): shard i
    of n of the suite's full list (``units.shard_cases``: a timed task's unit is a grid point
    with every method, so its ratios stay within one shard; the full list, before
    ``--methods``, splits the same on every machine), then ``--methods``."""
    check_name(run_id, "--run-id")
    check_size(suite)
    methods = options.methods
    cases = suite.cases(options.device, run_id, options.resolved_dirs())
    everyone = shard_cases(cases, options.shard, bool(suite.task.timed))
    return [c for c in everyone if not methods or c.method in methods], everyone


def rounds_of(case: CaseSpec) -> int:
    """The suite's ``rounds`` setting (tasks without it measure once)."""
    return int(case.settings.get("rounds", 1) or 1)


def schedule(cases: list[CaseSpec]) -> list[tuple[CaseSpec, int]]:
    """(case, round) in the order they run: per grid point, round 1 of every method, then round
    2, ...; each round starts one method later than the last, so no method is always first
    after a grid point change. Methods of one point are then timed at the same moments of
    machine drift, which their per-round ratios cancel (the report's bootstrap takes those ratios)."""
    points: dict[str, list[CaseSpec]] = {}
    for c in cases:  # suite order: grid points outer, methods inner
        points.setdefault(point_key(c.params), []).append(c)
    out = []
    for members in points.values():
        for r in range(1, max(rounds_of(c) for c in members) + 1):
            shift = (r - 1) % len(members)
            out += [(c, r) for c in members[shift:] + members[:shift] if r <= rounds_of(c)]
    return out


def point_key(params) -> str:
    """A grid point's key: its parameters as JSON, keys sorted (a case's, a row's or a join's)."""
    return json.dumps(params, sort_keys=True, default=str)


def joining(
    todo: list[tuple[CaseSpec, int]],
    done: dict[tuple, dict],
    everyone: list[CaseSpec],
    held: Held,
    unpaired: bool,
    named: set[str] | None = None,
) -> tuple[list[tuple[CaseSpec, int]], set[tuple[str, int]], Join | None]:
    """(the todo, the (case_id, round)s that run unpaired, the join this pass starts or None) of a
    timed run. A method the run did not hold (not in ``held.methods``, the methods that ran)
    joining a grid point whose other methods finished every round there would be timed in another
    process than theirs, so its ratios would pair nothing: the point is measured again with every
    method in it (the baseline and the floor included), or, ``unpaired``, the newcomer runs alone
    and its rows say ``info.paired: false`` (the tables mark its ratios unpaired). A point still
    unfinished (an interrupted run) resumes as it is. A join recorded before and not finished at a
    point (``finishing``) goes on as it began. ``named`` (``--methods``): these methods only, so a
    point whose finished methods are not all named is not measured again (the others are kept as
    they were): its newcomers run alone there, unpaired, as with ``unpaired``."""
    points: dict[str, list[CaseSpec]] = {}
    for c in everyone:
        points.setdefault(point_key(c.params), []).append(c)
    there: dict[str, set] = {}  # point -> the methods with rows there
    for row in done.values():
        there.setdefault(point_key(row.get("params")), set()).add(row.get("method"))
    recorded = [(join, {point_key(p) for p in join.points}) for join in held.joins]
    ran = {cid for cid, _r in done}
    waiting = {(c.id, r) for c, r in todo}
    waiting_ids = {cid for cid, _r in waiting}
    again: set[tuple[str, int]] = set()
    lone: set[tuple[str, int]] = set()
    joined: dict[str, set[str]] = {}  # point -> the methods joining it now
    paired_join = True  # every point of this join measured again with its methods
    for key, members in points.items():
        for join, keys in recorded:
            if key in keys:
                more, alone = finishing(join, members, there.get(key, set()), done, waiting)
                again, lone = again | more, lone | alone
        finished = [c for c in members if c.id in ran]
        newcomers = [c for c in members if c.id in waiting_ids and c.id not in ran and c.method not in held.methods]
        if not finished or not newcomers:
            continue
        if not all((c.id, r) in done for c in finished for r in range(1, rounds_of(c) + 1)):
            continue  # an interrupted grid point: the resume finishes it
        joined[key] = {c.method for c in newcomers}
        # --unpaired, or --methods naming some of the point's methods only (the others kept)
        if unpaired or (named is not None and not {c.method for c in finished} <= named):
            paired_join = False
            lone |= {(c.id, r) for c in newcomers for r in range(1, rounds_of(c) + 1)} & waiting
        else:
            again |= {(c.id, r) for c in finished for r in range(1, rounds_of(c) + 1)}
    join = None
    if joined:
        methods = [m for m in dict.fromkeys(c.method for c in everyone) if any(m in ms for ms in joined.values())]
        started = datetime.now(timezone.utc).isoformat(timespec="seconds")  # as rows' started_at
        join = Join(methods, [points[key][0].params for key in joined], started, paired=paired_join)
    if not again:
        return todo, lone, join
    wanted = waiting | again
    involved = {cid for cid, _r in wanted}
    return [(c, r) for c, r in schedule([c for c in everyone if c.id in involved]) if (c.id, r) in wanted], lone, join


def finishing(
    join: Join, members: list[CaseSpec], there: set, done: dict[tuple, dict], waiting: set[tuple[str, int]]
) -> tuple[set[tuple[str, int]], set[tuple[str, int]]]:
    """(the (case_id, round)s to measure again, those that run unpaired) at a grid point of a
    recorded ``join`` (the point's cases ``members``, the methods with rows there ``there``, the
    todo's (case_id, round)s ``waiting``). A paired join is finished at a point once every round
    of its newcomers and of the methods that were there is measured since it started (a row's
    ``started_at``); until then the resume measures the rest of them together, as the join began.
    An unpaired join, or one whose point holds rows of a method this run cannot measure again (no
    longer in the suite), runs the newcomers' rounds left alone, unpaired."""
    newcomers = [c for c in members if c.method in join.methods]
    if not newcomers:
        return set(), set()  # not in this pass's suite (a later --methods names them again)
    if not join.paired or not there <= {c.method for c in members}:
        return set(), {(c.id, r) for c in newcomers for r in range(1, rounds_of(c) + 1)} & waiting
    measured = [c for c in members if c.method in join.methods or c.method in there]
    since = join.started_at  # rows started since are the join's (ISO times in UTC compare as text)
    stale = {
        (c.id, r)
        for c in measured
        for r in range(1, rounds_of(c) + 1)
        if str(done.get((c.id, r), {}).get("started_at") or "") < since
    }
    return stale, set()


@dataclass(frozen=True)
class Held:
    """What a run folder's run.json says about the run before this pass: the methods that ran
    (``RunMeta.methods``) and its joins (``RunMeta.joins``)."""

    methods: list[str]
    joins: list[Join]


def held_by(meta: RunMeta | None, done: dict[tuple, dict]) -> Held | None:
    """What the run folder's run.json (``meta``) says it held; None without a readable one (nobody
    can say which method joined: the run resumes as it is, and rewrites run.json). A run.json of
    format 1 listed the suite's methods, also those a narrowed ``--methods`` never ran: of those,
    the ones with rows in the folder ran (``done``, every finished row)."""
    if meta is None:
        return None
    if meta.format < 2:
        with_rows = {row.get("method") for row in done.values()}
        return Held([m for m in meta.methods if m in with_rows], meta.joins)
    return Held(meta.methods, meta.joins)


def check_same_settings(meta: RunMeta, suite: Suite, options: RunOptions) -> None:
    """Resuming ``--run-id`` with settings other than the folder's run.json (``meta``) records is
    one line naming them: its rows were measured under the old ones (a new run needs a new run id)."""
    now = json.loads(json.dumps({"settings": suite.settings.model_dump(), "grid": suite.grid}, default=str))
    before = {"settings": meta.settings, "grid": meta.grid}
    differ = [
        f"{block}.{key}" if block == "grid" else key
        for block in ("settings", "grid")
        for key in sorted(set(now[block]) & set(before[block]))
        if now[block][key] != before[block][key]
    ]
    if meta.device and meta.device != options.device:
        differ.append("device")
    if differ:
        raise SuiteError(
            f"--run-id {options.run_id}: this command's {', '.join(differ[:6])} differ from the run folder's "
            f"(run.json); its rows were measured with the old ones; allowed: the run's own settings "
            "(bench.py status shows its command), or another --run-id (or none) for the new settings"
        )


def pairing_of(case: CaseSpec) -> str:
    """The suite's ``pairing`` setting: ``rounds`` (a process per case and round) or ``windows``."""
    return case.settings.get("pairing") or "rounds"


def jobs(todo: list[tuple[CaseSpec, int]]) -> list[tuple[list[CaseSpec], int]]:
    """The worker processes of a run, in order: (cases, round). A case alone, or with ``pairing:
    windows`` every case of ``todo`` of one grid point and round together (schedule order)."""
    out: list[tuple[list[CaseSpec], int]] = []
    groups: dict[tuple, list[CaseSpec]] = {}
    for case, rnd in todo:
        if pairing_of(case) != "windows":
            out.append(([case], rnd))
            continue
        key = (point_key(case.params), rnd)
        if key not in groups:
            groups[key] = []
            out.append((groups[key], rnd))
        groups[key].append(case)
    return out


def check_pairing(suite: Suite, in_process: bool) -> None:
    """``pairing: windows`` needs a task that can run a group and one process per group."""
    if getattr(suite.settings, "pairing", "rounds") != "windows":
        return
    if not suite.task.groups:
        raise SuiteError(
            f"pairing: windows: task {suite.task_name!r} cannot measure several methods in one process; allowed: pairing: rounds"
        )
    if in_process:
        raise SuiteError(
            "pairing: windows runs every method of a grid point in one worker process, which a run "
            "under torchrun (ranks in-process) cannot do; allowed: pairing: rounds"
        )


@dataclass
class Plan:
    """A run's plan, made once (``plan_run``) and handed on: the suite with ``--methods`` joined,
    the (case, round)s still to run in schedule order, the finished rows ((case_id, round) ->
    row), the (case_id, round)s that run unpaired (``joining``), what was wrong with the rows
    file (``problems``: lines skipped), the run's joins (those run.json recorded, and the one
    this pass starts), the methods the folder held before (``held``: run.json's, [] without one),
    and the todo cut into worker processes (``jobs``) and into units with their jobs (``units``,
    for the local pool and array tasks)."""

    suite: Suite
    todo: list[tuple[CaseSpec, int]]
    done: dict[tuple, dict]
    lone: set[tuple[str, int]] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    joins: list[Join] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    jobs: list[tuple[list[CaseSpec], int]] = field(init=False)
    units: list[Unit] = field(init=False)

    def __post_init__(self) -> None:
        self.jobs = jobs(self.todo)
        self.units = split(self.todo, self.timed)
        for unit in self.units:
            unit.jobs = jobs(unit.todo)

    @property
    def timed(self) -> bool:
        """Whether the task times its methods against each other (its unit is a grid point)."""
        return bool(self.suite.task.timed)

    def run_meta(self, device: str, run_id: str) -> RunMeta:
        """The run.json of this pass, written before it runs: the suite's record, listing the
        methods that ran in the folder (its earlier passes' in their order, then those of its
        rows and this pass's todo in the suite's order, others after) and the run's joins."""
        ran = dict.fromkeys([*(row.get("method") for row in self.done.values()), *(c.method for c, _r in self.todo)])
        methods = list(self.held) + [m for m in self.suite.methods if m in ran and m not in self.held]
        methods += [m for m in ran if isinstance(m, str) and m not in methods]
        return dataclasses.replace(RunMeta.of_suite(self.suite, device, run_id), methods=methods, joins=list(self.joins))


def plan_rounds(suite: Suite, options: RunOptions, run_id: str, run_dir: Path | None) -> Plan:
    """The plan for this run folder as its rows are now: resume and ``retry_failed`` work round
    by round, and methods joining a timed run re-measure the grid points they join (``joining``;
    ``unpaired``: they run alone, their (case_id, round)s in ``lone``), as does a join run.json
    recorded and this pass finishes (``finishing``); the join this pass starts is added to the
    plan's ``joins``, which run.json records before anything runs. Unusable lines of its
    cases.jsonl are skipped and described in ``problems``. ``run_dir`` None: no folder yet (a
    ``--fresh`` dry run), so every (case, round) runs."""
    suite = with_methods(suite, options.methods)  # so the rows of added methods are this run's rows too
    cases, everyone = _select(suite, options, run_id)
    if run_dir is None:
        return Plan(suite, schedule(cases), {})
    refuse_links(run_dir)  # a planted link: refused before anything in the folder is read or written
    refuse_links(run_dir / ROWS_DIR)  # a launched sweep's per-task rows files
    problems: list[str] = []
    done = latest_rounds(read_usable_run_rows(run_dir, problems))
    todo = [
        (c, r)
        for c, r in schedule(cases)
        if (c.id, r) not in done or (options.retry_failed and done[(c.id, r)]["status"] in RETRYABLE)
    ]
    resumed = options.run_id is not None and not options.fresh  # its settings must be run.json's
    try:
        meta = read_run_meta(run_dir)
    except RowsError:
        if resumed:
            raise
        meta = None  # unreadable: see ``held_by``
    if meta is not None and resumed:
        check_same_settings(meta, suite, options)
    held = held_by(meta, done)
    if held is None:
        return Plan(suite, todo, done, problems=problems)
    lone: set[tuple[str, int]] = set()
    joins = list(held.joins)
    if suite.task.timed:
        named = set(options.methods) if options.methods else None
        todo, lone, join = joining(todo, done, everyone, held, options.unpaired, named)
        joins += [join] if join else []
    return Plan(suite, todo, done, lone, problems, joins, held.methods)


def refuse_beside_launch(run_dir: Path) -> None:
    """``RunLocked`` (one line naming them) while tasks of a launched sweep may run in ``run_dir``."""
    from posbench.run.sweep_state import busy_units
    from posbench.store.writing import RunLocked

    busy = busy_units(run_dir)
    if busy:
        shown = ", ".join(f"{key} (job {job or 'not started yet'})" for key, job in busy[:3])
        raise RunLocked(
            f"{run_dir}: tasks of a launched sweep still run here: {shown}"
            f"{f' and {len(busy) - 3} more' if len(busy) > 3 else ''}; allowed: wait for them "
            f"(bench.py status {run_dir}), or pick another --run-id"
        )


def plan_run(
    suite: Suite,
    options: RunOptions,
    run_dir: Path,
    lock: Callable[[], bool] | None = None,
    launched: bool = False,
) -> Plan:
    """Every check of a run, then its plan for ``run_dir`` (named by its run id). ``lock()``,
    called once the checks passed (nothing is written before), takes the run folder (``True``:
    this process writes it); the plan is then made again from the rows as they are under the
    lock, and rank 0's plan is every rank's (``options.in_process``). A plain run (not
    ``launched``) refuses a folder where a launch's tasks may still run: both would run the same
    cases."""
    check_pairing(suite, options.in_process)
    plan = plan_rounds(suite, options, run_dir.name, run_dir)
    if lock is not None and lock():
        if not launched:
            refuse_beside_launch(run_dir)
        plan = plan_rounds(suite, options, run_dir.name, run_dir)
        for problem in plan.problems:
            print(f"warning: {problem}", file=sys.stderr)
    todo, done, lone = broadcast((plan.todo, plan.done, plan.lone), options.in_process)  # rank 0's view decides
    return dataclasses.replace(plan, todo=todo, done=done, lone=lone)
