"""Precision: what half precision does to ALiBi (SambaNova's "ALiBi Deep Dive", 2023): distinct
bias values per dtype (``bias_counts``, the analysis in ``analysis.py``) and the perplexity cost of
a compute-dtype bias (``bias_dtype_ppl``). Details: docs/tasks/precision.md.
"""

from posbench.tasks.precision.task import TASK

__all__ = ["TASK"]
