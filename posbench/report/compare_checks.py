"""Whether two runs can be compared by ``bench.py compare``: the same GPU model, the same settings.

Different GPU models (``OtherHardware``) or settings that change a measurement
(``DifferentSettings``) are refused unless the user allows them, then said as warnings; other
hardware differences (CPU model, device type) and suite versions are warnings only.
"""

from __future__ import annotations

import json

import pandas as pd

from posbench.report.rows import cpu_model, gpu_name


def _hardware(rows: pd.DataFrame, envs: dict) -> dict[str, set]:
    return {
        "GPU": {g for g in (gpu_name(e) for e in envs.values()) if g},
        "CPU": {c for c in (cpu_model(e) for e in envs.values()) if c},
        "device": {str(d).split(":")[0] for d in rows["device"].dropna()},
    }


def hardware_warnings(base_rows, base_envs, new_rows, new_envs) -> list[str]:
    """One line per hardware property (GPU name, CPU model, device type) that differs."""
    base_hw, new_hw = _hardware(base_rows, base_envs), _hardware(new_rows, new_envs)
    out = []
    for prop in ("GPU", "CPU", "device"):
        if base_hw[prop] != new_hw[prop]:
            b = ", ".join(sorted(base_hw[prop])) or "none"
            n = ", ".join(sorted(new_hw[prop])) or "none"
            out.append(f"{prop} differs: base ran on {b}, new on {n}; ratios compare machines as well as code.")
    return out


class OtherHardware(ValueError):
    """BASE and NEW ran on different GPU models: their ratios would compare GPUs, not code."""


def _gpu_models(envs: dict, rows: pd.DataFrame) -> str:
    models = sorted({g for g in (gpu_name(e) for e in envs.values()) if g})
    if models:
        return ", ".join(models)
    devices = sorted({str(d).split(":")[0] for d in rows["device"].dropna()})
    return "no GPU model recorded" + (f" (device {', '.join(devices)})" if devices else "")


def check_same_gpu(base_rows, base_envs, new_rows, new_envs) -> None:
    """``OtherHardware`` (one line naming both sides' GPU models) when they differ; a run whose
    env.json names no GPU (a CPU run, or a GPU run without NVML) differs from one that names one."""
    base_hw, new_hw = _hardware(base_rows, base_envs), _hardware(new_rows, new_envs)
    if base_hw["GPU"] != new_hw["GPU"]:
        raise OtherHardware(
            f"base and new ran on different GPU models (base: {_gpu_models(base_envs, base_rows)}; new: "
            f"{_gpu_models(new_envs, new_rows)}): their ratios would compare GPUs, not code; compare runs of one "
            "GPU model, or pass --allow-other-hardware to compare them anyway"
        )


def suite_warnings(base_metas: dict, new_metas: dict) -> list[str]:
    """A line per suite whose version differs between the runs (run.json): its results may not
    be comparable, which is what bumping ``version`` says."""
    versions = {}
    for side, metas in (("base", base_metas), ("new", new_metas)):
        for meta in metas.values():
            if meta is not None:
                versions.setdefault(meta.suite, {}).setdefault(side, set()).add(meta.version)
    return [
        f"suite {suite} version differs: base ran v{', v'.join(map(str, sorted(v['base'])))}, new "
        f"v{', v'.join(map(str, sorted(v['new'])))}; the suite says old results may not be comparable."
        for suite, v in versions.items()
        if len(v) == 2 and v["base"] != v["new"]
    ]


# Settings that change no measurement: how long a case may take, how much memory it may hold.
NOT_MEASURED = ("timeout_s", "memory_limit_mb")


class DifferentSettings(ValueError):
    """BASE and NEW were measured with different settings: their ratios would compare settings, not code."""


def _settings(rows: pd.DataFrame, device: bool) -> dict[str, set[str]]:
    """setting -> the values (as JSON) the rows ran with, and (``device``) ``device`` -> their device types."""
    out: dict[str, set[str]] = {}
    for settings in rows["settings"]:
        for key, value in (settings if isinstance(settings, dict) else {}).items():
            if key not in NOT_MEASURED:
                out.setdefault(key, set()).add(json.dumps(value, sort_keys=True, default=str))
    if device:
        out["device"] = {json.dumps(str(d).split(":")[0]) for d in rows["device"].dropna()}
    return out


def settings_differences(base_rows: pd.DataFrame, new_rows: pd.DataFrame, device: bool = True) -> list[str]:
    """``rounds (base 2, new 5)`` per setting that changes a measurement (every setting but
    ``NOT_MEASURED``: windows, rounds, steps, dtype, model, ...; and, ``device``, the device type:
    with ``--allow-other-hardware`` a hardware warning says that one) and differs."""
    base, new = _settings(base_rows, device), _settings(new_rows, device)
    out = []
    for key in sorted(set(base) | set(new)):
        b, n = base.get(key, set()), new.get(key, set())
        if b != n:
            out.append(f"{key} (base {', '.join(sorted(b)) or 'unset'}, new {', '.join(sorted(n)) or 'unset'})")
    return out


def check_same_settings(base_rows: pd.DataFrame, new_rows: pd.DataFrame, device: bool = True) -> None:
    """``DifferentSettings``, one line naming every differing setting with both sides' values."""
    differ = settings_differences(base_rows, new_rows, device)
    if differ:
        raise DifferentSettings(
            f"base and new were measured with different settings: {'; '.join(differ)}; their ratios would "
            "compare settings, not code; compare runs of the same settings, or pass --allow-different-settings "
            "to compare them anyway"
        )
