"""posbench.run.machine: the busy-machine warning only where the run measures speed."""

from __future__ import annotations

import json

from posbench.engine import env as envmod
from posbench.engine.env import busy_warning  # the real one: tests/conftest.py silences it
from posbench.run.machine import record_machine

BUSY = {"busy": True, "busy_processes": [], "other_cpu": 1.5, "load_avg": [3.0, 3.0, 3.0], "cpu_count": 2}


def test_busy_warning_only_for_timed_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(envmod, "machine_state", lambda device: dict(BUSY))
    monkeypatch.setattr(envmod, "busy_warning", busy_warning)
    (tmp_path / "env.json").write_text("{}")
    record_machine(tmp_path, "start", "cpu", timed=True)
    assert "speed numbers will be noisy" in capsys.readouterr().err
    record_machine(tmp_path, "end", "cpu", timed=False)  # a perplexity-only suite: no speed to spoil
    assert capsys.readouterr().err == ""
    machine = json.loads((tmp_path / "env.json").read_text())["machine"]
    assert machine["start"]["busy"] and machine["end"]["busy"]  # recorded either way
