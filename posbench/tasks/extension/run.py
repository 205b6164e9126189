"""One extension case: a recipe that does not apply to the method is an unavailable row; with
``--model hf:DIR`` the checkpoint is extended (``pretrained``), else a base model trained here
(``finetune``). Details: docs/tasks/extension.md."""

from __future__ import annotations

from posbench.core.outcome import Unavailable
from posbench.tasks.extension.regimes import unavailable

# torch, the corpus, the model and training are imported inside run(): validating a suite imports
# this module, and `bench.py validate` must not wait for torch.


def run(case) -> dict:
    reason = unavailable(case.method, case.params.recipe, case.params.bias_dtype)
    if reason:
        raise Unavailable(reason)
    if case.settings.pretrained:  # --model hf:DIR: the checkpoint instead of a base model trained here
        from posbench.tasks.extension.pretrained import run_pretrained

        return run_pretrained(case)
    from posbench.tasks.extension.finetune import run_case

    return run_case(case)
