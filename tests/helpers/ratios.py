"""The check that paired ratios give back a planted speed ratio under drift (rounds and windows)."""

from __future__ import annotations

import pytest

from posbench.report import bootstrap


def recovers_planted_ratio(method, base, speeds, pairs: int, tol: float, width: float, planted=0.9):
    """Paired ratios of ``method`` and ``base`` (drifting together by ``speeds``) give back the
    planted ratio within ``tol``, from ``pairs`` pairs, with an interval narrower than ``width``
    that holds the ratio (and the planted one, up to ``tol / 2``); returns the interval."""
    assert max(speeds) / min(speeds) > 1.2  # absolute speeds wander by more than 20%
    ratio, interval, n = bootstrap.paired_ratio(method, base)
    assert n == pairs and ratio == pytest.approx(planted, abs=tol)
    assert interval[0] <= ratio <= interval[1] and interval[1] - interval[0] < width
    assert interval[0] - tol / 2 < planted < interval[1] + tol / 2
    return interval
