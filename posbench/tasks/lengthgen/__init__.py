"""Lengthgen: does a method generalise an algorithm (Ruoss et al. 2023, Kazemnejad et al. 2023) to
longer inputs than it was trained on? Train on lengths 1..L_train, score exact match at each test
length, learn first, then compare. How a case runs: docs/tasks/lengthgen.md.
"""

from posbench.tasks.lengthgen.task import TASK

__all__ = ["TASK"]
