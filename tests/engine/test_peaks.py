"""The table of known GPUs' dense peak FLOP/s (issue 54): datasheet values looked up by the name
torch.cuda.get_device_name gives, dense (half the sparse figure), None for what is not known."""

import pytest

from posbench.engine.peaks import DENSE_PEAKS, dense_peak, peak_fraction


def test_hopper_and_ampere_dense_bf16_peaks_are_the_datasheets_dense_figures():
    assert dense_peak("NVIDIA H100 80GB HBM3", "bfloat16") == pytest.approx(989.4e12)
    assert dense_peak("NVIDIA H200", "bfloat16") == dense_peak("NVIDIA H100 80GB HBM3", "bfloat16")
    assert dense_peak("NVIDIA A100-SXM4-80GB", "bfloat16") == pytest.approx(312e12)
    assert dense_peak("NVIDIA L4", "float16") == pytest.approx(121e12)  # 242 with 2:4 sparsity


def test_float32_is_the_cuda_cores_rate_unless_tf32_is_allowed():
    assert dense_peak("NVIDIA H100 80GB HBM3", "float32") == pytest.approx(66.9e12)
    assert dense_peak("NVIDIA H100 80GB HBM3", "float32", tf32=True) == pytest.approx(494.7e12)
    assert dense_peak("NVIDIA H100 80GB HBM3", "torch.bfloat16") == pytest.approx(989.4e12)


def test_an_unknown_device_or_a_dtype_the_device_lacks_is_none():
    assert dense_peak("NVIDIA A10G", "bfloat16") is None  # no vendor datasheet: unknown, not guessed
    assert dense_peak(None, "bfloat16") is None
    assert dense_peak("Tesla T4", "bfloat16") is None  # Turing has no bf16 tensor cores
    assert peak_fraction(500e12, "NVIDIA GeForce Unknown", "bfloat16") is None
    assert peak_fraction(494.7e12, "NVIDIA H100 80GB HBM3", "bfloat16") == pytest.approx(0.5)


def test_every_peak_orders_tensor_cores_above_cuda_cores():
    for name, peaks in DENSE_PEAKS.items():
        tensor = peaks.get("bfloat16", peaks["float16"])
        assert tensor > peaks.get("tf32", peaks["float32"]) >= peaks["float32"], name
