"""Extension: take a model trained at L_train, apply a context-extension recipe (rotary scalings,
ALiBi interpolation, DroPE), fine-tune k steps at L_target = target_factor x L_train (k = 0: zero-shot)
and measure perplexity at L_target and beyond and passkey accuracy. Details: docs/tasks/extension.md.
"""

from posbench.tasks.extension.task import TASK

__all__ = ["TASK"]
