"""Attention kernels in plain PyTorch and the plans that choose among them for a bias method.

Below ``posbench.core``: imports torch and itself only. ``plans.py`` is the way in.
"""
