"""The trained model of a train-then-evaluate case: where it is kept (``checkpoint_path``) and the
model itself, trained at the case's L_train with one seed or reloaded from the checkpoint an
earlier run of the case left (``train_case_model``), with the metrics and series of its training.
"""

from __future__ import annotations

from pathlib import Path

from posbench.core.task import case_model_config
from posbench.protocols.training import budget_metrics

# torch, the corpus and the model are imported inside the functions that run a case: validating a
# suite imports this module (through the task's declaration), and must not wait for torch.


def checkpoint_path(case, name: str | None = None) -> Path | None:
    """Where this case's trained model is kept: ``<run folder>/checkpoints/<case id>.pt``."""
    if not case.out_dir:
        return None
    return Path(case.out_dir) / "checkpoints" / ((name or case.id).replace("/", "__") + ".pt")


def train_case_model(case, corpus, ckpt: Path | None, method_options: dict, seed: int, tracker=None):
    """Train at the case's L_train with ``seed`` (or load the checkpoint an earlier run of this case
    left), under the case's settings; (model, metrics, series). ``tracker``: where the training
    curves go (``engine.tracking``)."""
    from posbench.data.corpus import batches
    from posbench.engine.timing import make_device
    from posbench.engine.train import Checkpointing
    from posbench.engine.train import trained_model as train_or_load

    s, L = case.settings, case.params.L_train
    cfg = case_model_config(case, method_options, vocab_size=corpus.vocab_size)
    meter = make_device(torch_device_type(case.device))
    meter.reset_peak()  # the training's own peak, apart from an earlier seed's and the evaluations'
    model, r, reused = train_or_load(
        cfg,
        s.train_config(L, seed),
        lambda: batches(corpus.split("train"), L, s.batch_size, seed=seed),
        case.device,
        Checkpointing(ckpt, s.reuse_checkpoint),
        tracker,
    )
    peak = None if reused else meter.peak()["allocated"]
    series = {"train_loss": [list(p) for p in r.curve], "corpus": corpus.describe()}
    metrics = dict(
        final_train_loss=r.final_loss,
        train_steps=r.steps,
        train_tokens=r.tokens,
        train_seconds=r.seconds,
        reused_checkpoint=int(reused),
        n_params=model.num_parameters(),
        best_ppl=corpus.best_ppl,
        peak_mem_train_bytes=peak,
        train_s_per_token=None if reused or not r.tokens else r.seconds / r.tokens,
        **budget_metrics(r),
    )
    return model, metrics, series


def torch_device_type(device) -> str:
    """``cpu`` or ``cuda`` of a case's device string (``cuda:1`` -> ``cuda``)."""
    return str(device).split(":")[0]
