"""Retrieval: can a method use what is far away? Train at L_train on text mixed with retrieval
probes (``probes``), then score the probes' answers, decoded through the KV cache, at L_valid =
L_train x factor; Wilson intervals, effective length, learn first. Details: docs/tasks/retrieval.md.
"""

from posbench.tasks.retrieval.task import TASK

__all__ = ["TASK"]
