"""A results-page run folder as the runner writes it (efficiency, two methods, two lengths),
shared by tests/report's results-page and page-escaping tests."""

from __future__ import annotations

import json
from pathlib import Path

from posbench.store.meta import RunMeta, write_run_meta

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SETTINGS = {
    "model": "tiny",
    "dtype": "float32",
    "tokens_per_step": 1024,
    "lr": 1e-05,
    "windows": 3,
    "eval_measure_steps": None,
    "method_options": {"alibi": {"bias_dtype": "compute"}},
    "pairing": "windows",
}
CPU_ENV = {
    "posbench_version": "0.1.0",
    "git_commit": COMMIT,
    "git_dirty": False,
    "python": "3.12.1",
    "torch": "2.13.0+cpu",
    "cuda": "not built with CUDA",
    "triton": "3.4.0",
    "os": "Linux-6.1-x86_64",
    "cpu": "Test CPU 9000",
    "cpu_count": 2,
    "torch_threads": 2,
    "device": "cpu",
    "nvml": "unavailable: needs CUDA and NVML (pip install nvidia-ml-py)",
}
GPU_ENV = {
    **CPU_ENV,
    "torch": "2.13.0+cu128",
    "cuda": "12.8",
    "device": "cuda",
    "gpu": "NVIDIA H100 80GB HBM3",
    "nvml": {"name": "NVIDIA H100 80GB HBM3", "driver": "570.1"},
}
WPS = {"sinusoidal": 20000.0, "alibi": 19000.0}


def write_run(root: Path, run_id: str, env: dict, device: str = "cpu", command=None) -> Path:
    """An efficiency run of two methods at two lengths, written as the runner writes it."""
    run_dir = root / "results" / "efficiency" / run_id
    run_dir.mkdir(parents=True)
    with (run_dir / "cases.jsonl").open("w") as fh:
        for i, (method, wps) in enumerate(WPS.items()):
            for seq_len in (64, 128):
                fh.write(
                    json.dumps(
                        {
                            "case_id": f"efficiency/{method}/seq_len={seq_len}",
                            "suite": "efficiency",
                            "task": "efficiency",
                            "method": method,
                            "params": {"seq_len": seq_len},
                            "status": "ok",
                            "message": "",
                            "metrics": {"train_wps": wps * 64 / seq_len, "eval_wps": 3 * wps},
                            "series": {},
                            "info": {},
                            "settings": SETTINGS,
                            "device": device,
                            "profile": "cpu",
                            "run_id": run_id,
                            "started_at": f"2026-11-23T21:0{i}:00+00:00",
                            "duration_s": 2.0,
                            "posbench_version": "0.1.0",
                            "git_commit": COMMIT,
                        }
                    )
                    + "\n"
                )
    (run_dir / "env.json").write_text(json.dumps(env))
    write_run_meta(
        run_dir,
        RunMeta(
            suite="efficiency",
            version=4,
            task="efficiency",
            baseline="sinusoidal",
            methods=list(WPS),
            metrics=["train_wps", "eval_wps"],
            settings=SETTINGS,
            grid={"seq_len": [64, 128]},
            profile="cpu",
            device=device,
            run_id=run_id,
            posbench_version="0.1.0",
            written_at="2026-11-23T20:59:59+00:00",
        ),
    )
    if command is not None:
        data = json.loads((run_dir / "run.json").read_text())
        (run_dir / "run.json").write_text(json.dumps({**data, "command": command}))
    return run_dir
