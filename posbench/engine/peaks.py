"""Known GPUs' dense peak FLOP/s, so a measured rate can be read as a share of the machine
(the kernels suite's fraction of peak, the efficiency tables' MFU).

Keyed by the name ``torch.cuda.get_device_name()`` gives. Every number is the vendor's datasheet
figure *without* structured sparsity (datasheets print the 2:4-sparse rate first; the dense rate
is half of it). ``float32`` is the CUDA cores' rate; ``tf32`` is the tensor cores' rate for
float32 matmuls when TF32 is allowed. A dtype a device lacks (bf16 before Ampere) is absent.
A device not listed is unknown: the lookup returns None and the page says so, never a guess
(the A10G, for one, has no NVIDIA datasheet).
"""

from __future__ import annotations

T = 1e12

_H100_SXM = {"bfloat16": 989.4 * T, "float16": 989.4 * T, "tf32": 494.7 * T, "float32": 66.9 * T}
_H100_PCIE = {"bfloat16": 756.0 * T, "float16": 756.0 * T, "tf32": 378.0 * T, "float32": 51.2 * T}
_HOPPER_NVL = {"bfloat16": 835.5 * T, "float16": 835.5 * T, "tf32": 417.5 * T, "float32": 60.0 * T}
_A100 = {"bfloat16": 312.0 * T, "float16": 312.0 * T, "tf32": 156.0 * T, "float32": 19.5 * T}
_V100_SXM2 = {"float16": 125.0 * T, "float32": 15.7 * T}
_V100_PCIE = {"float16": 112.0 * T, "float32": 14.0 * T}

# device name -> dtype -> dense peak FLOP/s
DENSE_PEAKS: dict[str, dict[str, float]] = {
    "NVIDIA H100 80GB HBM3": _H100_SXM,
    "NVIDIA H100 PCIe": _H100_PCIE,
    "NVIDIA H100 NVL": _HOPPER_NVL,
    "NVIDIA H200": _H100_SXM,  # the H200 SXM has the H100 SXM's tensor cores and clocks, more memory
    "NVIDIA H200 NVL": _HOPPER_NVL,
    "NVIDIA A100-SXM4-40GB": _A100,
    "NVIDIA A100-SXM4-80GB": _A100,
    "NVIDIA A100-PCIE-40GB": _A100,
    "NVIDIA A100 80GB PCIe": _A100,
    "NVIDIA L40S": {"bfloat16": 362.05 * T, "float16": 362.05 * T, "tf32": 183.0 * T, "float32": 91.6 * T},
    "NVIDIA L4": {"bfloat16": 121.0 * T, "float16": 121.0 * T, "tf32": 60.0 * T, "float32": 30.3 * T},
    "NVIDIA A10": {"bfloat16": 125.0 * T, "float16": 125.0 * T, "tf32": 62.5 * T, "float32": 31.2 * T},
    "Tesla T4": {"float16": 65.0 * T, "float32": 8.1 * T},
    "Tesla V100-SXM2-16GB": _V100_SXM2,
    "Tesla V100-SXM2-32GB": _V100_SXM2,
    "Tesla V100-PCIE-16GB": _V100_PCIE,
    "Tesla V100-PCIE-32GB": _V100_PCIE,
}


def dense_peak(device_name: str | None, dtype: str, *, tf32: bool = False) -> float | None:
    """Dense peak FLOP/s of ``device_name`` at ``dtype`` ("bfloat16", "float16", "float32"; with
    ``tf32`` a float32 matmul runs on the tensor cores), or None for an unknown device or dtype."""
    peaks = DENSE_PEAKS.get((device_name or "").strip())
    if peaks is None:
        return None
    key = "tf32" if dtype == "float32" and tf32 else dtype.removeprefix("torch.")
    return peaks.get(key)


def peak_fraction(flops_per_s: float, device_name: str | None, dtype: str, *, tf32: bool = False) -> float | None:
    """``flops_per_s`` as a fraction of the device's dense peak, or None when the peak is unknown."""
    peak = dense_peak(device_name, dtype, tf32=tf32)
    return None if peak is None else flops_per_s / peak
