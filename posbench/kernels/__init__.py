"""Fused attention kernels (Triton)."""
