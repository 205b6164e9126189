"""The tasks: one package per task (``efficiency/``, ``extrapolation/``, ...), each owning its
helpers and its report section and declaring its ``TASK``; ``training`` holds what the tasks that
train a model on a corpus share. The contract and the registry live in ``posbench.core.task``."""
