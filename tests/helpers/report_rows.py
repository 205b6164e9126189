"""Synthetic run folders in the runner's result format, for the report/compare/chart tests.

Numbers are made up but follow a rule (stated beside each helper), so tests can recompute what a
table or chart must show from the rows themselves.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from posbench.store.meta import RunMeta, write_run_meta

LENGTHS = [256, 512, 1024]
EFF_METHODS = ["sinusoidal", "rotary", "t5_bias", "alibi", "alibi_triton"]
# words/s at length 256; longer sequences are slower by sqrt(L / 256).
BASE_WPS = {"sinusoidal": 26000.0, "rotary": 24000.0, "t5_bias": 13000.0, "alibi": 25800.0}
L_VALID = [64, 128, 256, 512]
PPL_METHODS = ["sinusoidal", "rotary", "alibi"]

CPU_ENV = {
    "posbench_version": "0.1.0",
    "git_commit": "abc1234def5678",
    "python": "3.12.0",
    "torch": "2.13.0",
    "cuda": None,
    "cpu": "Test CPU 9000",
    "nvml": "unavailable: no GPU",
    "device": "cpu",
}
GPU_ENV = {**CPU_ENV, "cuda": "12.4", "device": "cuda", "nvml": {"name": "NVIDIA A100-SXM4-80GB", "driver": "550.54"}}


def base_row(suite, task, method, params, run_id, **extra) -> dict:
    case_id = f"{suite}/{method}/" + ",".join(f"{k}={v}" for k, v in sorted(params.items()))
    row = {
        "case_id": case_id,
        "suite": suite,
        "task": task,
        "method": method,
        "params": params,
        "status": "ok",
        "message": "",
        "metrics": {},
        "series": {},
        "settings": {},
        "device": "cpu",
        "profile": "cpu",
        "run_id": run_id,
        "started_at": "2024-06-01T12:00:00+00:00",
        "duration_s": 1.5,
        "posbench_version": "0.1.0",
        "git_commit": "abc1234def5678",
    }
    row.update(extra)
    return row


def efficiency_rows(run_id="run-a", scale=1.0, device="cpu") -> list[dict]:
    """5 methods x 3 lengths; alibi_triton is unavailable, t5_bias runs out of memory at 1024.

    ``scale`` multiplies every words/s (0.9 plants a 10% regression).
    """
    rows = []
    for method in EFF_METHODS:
        for L in LENGTHS:
            row = base_row("efficiency", "efficiency", method, {"seq_len": L}, run_id, device=device)
            if method == "alibi_triton":
                row.update(status="unavailable", message="needs CUDA and triton")
            elif method == "t5_bias" and L == 1024:
                row.update(status="oom", message="CUDA out of memory")
            else:
                wps = BASE_WPS[method] / math.sqrt(L / 256) * scale
                row["metrics"] = {
                    "train_wps": wps,
                    "train_wps_min": wps * 0.98,
                    "train_wps_max": wps * 1.01,
                    "eval_wps": 3 * wps,
                    "eval_wps_min": 2.9 * wps,
                    "eval_wps_max": 3.1 * wps,
                    "peak_mem_train_bytes": L * 1_000_000 + len(method),
                    "peak_mem_eval_bytes": L * 400_000,
                    "j_per_token": None,
                    "n_params": 1_000_000,
                    "batch_size": 8,
                }
            rows.append(row)
    return rows


def ppl_value(method: str, l_valid: int, l_train: int = 64) -> float:
    """Sinusoidal blows up past L_train, rotary degrades slowly, alibi improves."""
    over = max(l_valid / l_train, 1.0)
    return {"sinusoidal": 20.0 * over**2, "rotary": 20.0 * over**0.5, "alibi": 20.0 / over**0.05}[method]


def extrapolation_rows(run_id="run-x", l_train=64) -> list[dict]:
    """3 methods x L_valid grid (nonoverlapping) + sliding at 128; rotary OOMs at L_valid 512."""
    rows = []
    for method in PPL_METHODS:
        evals, per_pos = [], {}
        for lv in L_VALID:
            if method == "rotary" and lv == 512:
                evals.append(
                    {
                        "mode": "nonoverlapping",
                        "L_valid": lv,
                        "stride": None,
                        "interpolate": False,
                        "ppl": None,
                        "loss": None,
                        "tokens": 0,
                        "status": "oom",
                        "message": "OOM",
                    }
                )
                continue
            ppl = ppl_value(method, lv, l_train)
            evals.append(
                {
                    "mode": "nonoverlapping",
                    "L_valid": lv,
                    "stride": None,
                    "interpolate": False,
                    "ppl": ppl,
                    "loss": math.log(ppl),
                    "tokens": 4096,
                    "status": "ok",
                    "message": "",
                }
            )
            per_pos[f"nonoverlapping@{lv}"] = [3.0 + 0.001 * i for i in range(lv)]
        evals.append(
            {
                "mode": "sliding",
                "L_valid": 128,
                "stride": 32,
                "interpolate": False,
                "ppl": ppl_value(method, 128, l_train) * 0.9,
                "loss": 1.0,
                "tokens": 4096,
                "status": "ok",
                "message": "",
            }
        )
        row = base_row("extrapolation", "extrapolation", method, {"L_train": l_train}, run_id)
        row["metrics"] = {"best_ppl": 12.5}
        row["series"] = {"evals": evals, "per_position_loss": per_pos, "train_loss": [[0, 5.0], [10, 4.0], [20, 3.5]]}
        rows.append(row)
    return rows


PRECISION_DTYPES = ["float32", "float16", "bfloat16"]
PRECISION_L_VALID = [64, 512, 2048]


def precision_ppl(bias: str, l_valid: int) -> float:
    """Perplexity of the bias_dtype_ppl study: 20 with a float32 bias; the compute-dtype bias costs
    l_valid / 1024 more (it loses positions far away)."""
    return 20.0 + (l_valid / 1024 if bias == "compute" else 0.0)


def precision_rows(run_id="run-p") -> list[dict]:
    """The precision suite's cpu layout: both studies for alibi; alibi_triton unavailable in both.

    bias_counts: distinct values 256/31/4 for float32/float16/bfloat16 (a 8-head, 256-position
    analysis whose staircases are drawn for heads 0 and 7). bias_dtype_ppl: ``precision_ppl``,
    plus the training's housekeeping values.
    """
    rows = []
    for study in ("bias_counts", "bias_dtype_ppl"):
        for method in ("alibi", "alibi_triton"):
            row = base_row("precision", "precision", method, {"study": study, "L_train": 64}, run_id)
            if method == "alibi_triton":
                row.update(status="unavailable", message="needs CUDA and triton")
            elif study == "bias_counts":
                row["metrics"] = {f"last_window_distinct@{d}": n for d, n in zip(PRECISION_DTYPES, (256, 31, 4))}
                row["series"] = {
                    "settings": {
                        "n_heads": 8,
                        "length": 256,
                        "window": 64,
                        "heads": [0, 7],
                        "factor": 0.25,
                        "dtypes": PRECISION_DTYPES,
                    },
                    "charts": [{"head": h, "dtypes": PRECISION_DTYPES, "png": "gone.png", "svg": "gone.svg"} for h in (0, 7)],
                }
            else:
                metrics = {
                    "final_train_loss": 2.5,
                    "train_steps": 200,
                    "train_tokens": 409600,
                    "train_seconds": 31.0,
                    "reused_checkpoint": 0,
                    "n_params": 120000,
                    "best_ppl_eval": 12.0,
                }
                for lv in PRECISION_L_VALID:
                    for bias in ("float32", "compute"):
                        metrics[f"ppl@{bias}_bias@{lv}"] = precision_ppl(bias, lv)
                    metrics[f"ppl_diff@{lv}"] = precision_ppl("compute", lv) - precision_ppl("float32", lv)
                metrics["ppl_diff_at_max_len"] = metrics[f"ppl_diff@{PRECISION_L_VALID[-1]}"]
                row["metrics"] = metrics
            rows.append(row)
    return rows


RETRIEVAL_METHODS = ["sinusoidal", "rotary", "t5_bias", "alibi"]


def retrieval_rows(run_id="run-r") -> list[dict]:
    """passkey at L_train 8, L_valid 8/16, two depths, 10 samples each: every method but
    sinusoidal scores exactly alike (10 and 6 of 10 per depth), so their lines coincide."""
    rows = []
    for method in RETRIEVAL_METHODS:
        right = {8: 10, 16: 1} if method == "sinusoidal" else {8: 10, 16: 6}
        cells = [
            {"L_valid": lv, "depth": d, "correct": k, "total": 10, "status": "ok", "message": ""}
            for lv, k in right.items()
            for d in (0.0, 1.0)
        ]
        row = base_row("retrieval", "retrieval", method, {"L_train": 8, "probe": "passkey"}, run_id)
        acc = {lv: k / 10 for lv, k in right.items()}
        row["metrics"] = {
            "acc_at_train_len": acc[8],
            "acc_at_max_len": acc[16],
            "effective_length": 16 if acc[16] >= 0.5 else 8,
            "chance": 0.1,
            "train_steps": 100,
            "n_params": 50000,
            **{f"acc@{lv}": a for lv, a in acc.items()},
        }
        row["series"] = {"cells": cells}
        rows.append(row)
    return rows


PRECISION_SUITE_METRICS = ["last_window_distinct@float16", "last_window_distinct@bfloat16", "ppl_diff_at_max_len"]


def write_run(
    root: Path,
    rows: list[dict],
    env: dict | None = None,
    suite=None,
    run_id=None,
    baseline: str | None = "sinusoidal",
    metrics: list[str] | None = None,
    methods: list[str] | None = None,
    meta: bool = True,
) -> Path:
    """Write ``root/<suite>/<run-id>/cases.jsonl``, ``env.json`` and (unless ``meta`` is False, as
    for a run written before posbench kept one) ``run.json`` through the runner's own writer;
    return the run folder. ``methods``: the suite's order, default the order of the rows."""
    suite = suite or rows[0]["suite"]
    run_id = run_id or rows[0]["run_id"]
    run_dir = Path(root) / suite / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "cases.jsonl").open("w") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    (run_dir / "env.json").write_text(json.dumps(env if env is not None else CPU_ENV))
    if meta:
        order = methods or list(dict.fromkeys(r["method"] for r in rows))
        write_run_meta(
            run_dir,
            RunMeta(
                suite=suite,
                version=1,
                task=rows[0]["task"],
                baseline=baseline,
                methods=order,
                metrics=list(metrics or []),
                run_id=run_id,
                grid={k: sorted({r["params"][k] for r in rows if k in r["params"]}) for k in rows[0]["params"]},
            ),
        )
    return run_dir


def lengthgen_rows(run_id="run-l") -> list[dict]:
    rows = []
    for method in ("sinusoidal", "alibi"):
        cells = [
            {"n": n, "correct": 10 if n <= 8 else (2 if method == "sinusoidal" else 7), "total": 10, "status": "ok"}
            for n in (4, 8, 12, 16)
        ]
        row = base_row("lengthgen", "lengthgen", method, {"L_train": 8, "task": "copy"}, run_id)
        row["metrics"] = {"acc_at_train_len": 1.0, "acc_at_max_len": cells[-1]["correct"] / 10, "learned": 1}
        row["series"] = {"cells": cells, "learned_threshold": 0.9}
        rows.append(row)
    return rows
