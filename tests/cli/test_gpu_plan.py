"""The GPU workflow's plan fits its limits (issue 69): every gpu profile's estimated GPU time splits
into legs that each fit the bench job's limit, the weekly run fits a week, a suite no split fits is
refused in one line, and a suite's shards are joined into one run folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from posbench.cli import gpu_plan
from posbench.run import gpu_time
from posbench.run.suite import loading

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / ".github" / "workflows" / "gpu-bench.yml"
SETUP_MINUTES = 30  # install and corpus before a leg's first case


def _doc() -> dict:
    doc = yaml.safe_load(GPU.read_text())
    doc["on"] = doc.pop(True, doc.get("on"))
    return doc


def test_every_weekly_leg_fits_the_bench_jobs_limit_and_the_week_fits_a_week(tmp_path, monkeypatch):
    doc = _doc()
    plan, bench = doc["jobs"]["plan"], doc["jobs"]["bench"]
    leg_minutes = float(plan["env"]["LEG_MINUTES"])
    assert leg_minutes + SETUP_MINUTES <= bench["timeout-minutes"]
    weekly = json.loads(plan["env"]["WEEKLY_SUITES"])
    assert sorted(weekly) == sorted(loading.names())
    out = tmp_path / "out"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    assert gpu_plan.main(["matrix", "--suites", json.dumps(weekly), "--limit-minutes", str(leg_minutes)]) == 0
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines())
    legs = json.loads(outputs["legs"])
    assert json.loads(outputs["suites"]) == weekly
    total = 0.0
    for name in weekly:
        estimate = gpu_time.estimate(loading.resolve(loading.load(name), "gpu"))
        mine = [leg for leg in legs if leg["suite"] == name]
        n = len(mine)
        assert [leg["shard"] for leg in mine] == [f"{i}/{n}" for i in range(n)]  # every shard, once
        for i in range(n):
            assert estimate.shard_s(i, n) <= leg_minutes * 60, f"{name} shard {i}/{n} could outlast its job"
        total += estimate.total_s + n * SETUP_MINUTES * 60
    assert total < 7 * 24 * 3600, "the weekly run would not end before the next one starts"
    assert len([leg for leg in legs if leg["suite"] == "frontier"]) > 1  # 48 GPU-hours: sharded


def test_a_suite_with_a_case_longer_than_a_job_is_refused_in_one_line(capsys):
    assert gpu_plan.main(["matrix", "--suites", '["frontier"]', "--limit-minutes", "300"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "frontier" in err and "over a job's 300 minutes" in err
    assert gpu_plan.main(["matrix", "--suites", "frontier", "--limit-minutes", "300"]) == 2
    assert "not a JSON list" in capsys.readouterr().err


def _run(folder: Path, run_id: str, rows: list[dict], suite: str = "ruler") -> Path:
    run = folder / run_id
    run.mkdir(parents=True)
    meta = {"suite": suite, "version": 1, "task": "retrieval", "baseline": "alibi", "methods": ["alibi"], "metrics": []}
    (run / "run.json").write_text(json.dumps({**meta, "run_id": run_id}))
    (run / "env.json").write_text("{}")
    (run / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_merge_joins_a_suites_shards_into_one_run_folder(tmp_path):
    _run(tmp_path / "new" / "bench-ruler-H100-0-of-2", "gpu-cuda-1", [{"case_id": "a"}])
    _run(tmp_path / "new" / "bench-ruler-H100-1-of-2", "gpu-cuda-1", [{"case_id": "b"}, {"case_id": "c"}])
    _run(tmp_path / "new" / "bench-decode-H100-0-of-1", "gpu-cuda-2", [{"case_id": "d"}], suite="decode")
    assert gpu_plan.main(["merge", str(tmp_path / "new"), str(tmp_path / "joined")]) == 0
    joined = tmp_path / "joined" / "ruler" / "gpu-cuda-1"
    assert [json.loads(line)["case_id"] for line in (joined / "cases.jsonl").read_text().splitlines()] == ["a", "b", "c"]
    assert sorted(p.name for p in joined.iterdir()) == ["cases.jsonl", "env.json", "run.json"]
    assert (tmp_path / "joined" / "decode" / "gpu-cuda-2" / "cases.jsonl").exists()
    with pytest.raises(SystemExit):
        gpu_plan.main(["merge"])


def test_docs_ci_states_each_gpu_profiles_estimate_as_the_plan_computes_it():
    text = (ROOT / "docs" / "ci.md").read_text()
    stated = text[
        text.index("<!-- gpu-estimates -->\n") + len("<!-- gpu-estimates -->\n") : text.index("\n<!-- /gpu-estimates -->")
    ]
    leg_minutes = float(_doc()["jobs"]["plan"]["env"]["LEG_MINUTES"])
    _legs, table = gpu_plan.legs(sorted(loading.names()), leg_minutes)
    assert stated == "\n".join(table), "docs/ci.md's GPU estimates are stale: paste what gpu_plan matrix prints"
