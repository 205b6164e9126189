"""The answers of the algorithmic tasks: a model trained with the loss on the answer tokens alone
(lengths 1..L_train), and its answers scored by exact match per test length (``s`` is the
lengthgen task's Settings)."""

from __future__ import annotations

import numpy as np
import torch

from posbench.core.model import TransformerLM
from posbench.core.task import case_model_config
from posbench.data import algorithmic as A
from posbench.engine.train import TrainConfig, trained_model
from posbench.protocols.training import budget_metrics

IGNORE = -100  # torch's cross_entropy ignore_index: a target the loss skips


def train_model(case, s, task: A.AlgoTask, seed: int | None = None) -> tuple[TransformerLM, dict]:
    """(model, metrics): a fresh model trained on examples of lengths 1..L_train of ``task`` with
    ``seed`` (weights and examples; default the settings' ``seed``), the loss on the answer tokens only."""
    L = case.params.L_train
    seed = s.seed if seed is None else seed
    # seq_len: the longest training row's inputs (it only sizes the engine's token count, which
    # lengthgen does not report: rows vary in length, so it reports examples instead)
    tcfg = TrainConfig(
        seq_len=task.seq_len(L) - 1,
        batch_size=s.batch_size,
        lr=s.lr,
        warmup_steps=s.warmup_steps,
        precision=s.precision,
        seed=seed,
        **s.budget_config(),
    )

    def batches():
        return (_with_targets(b) for b in A.training_batches(task.name, L, s.batch_size, seed))

    model, r, _ = trained_model(case_model_config(case, vocab_size=task.vocab_size), tcfg, batches, case.device)
    metrics = dict(
        final_train_loss=r.final_loss,
        train_steps=r.steps,
        train_examples=r.steps * s.batch_size,
        train_seconds=r.seconds,
        n_params=model.num_parameters(),
        **budget_metrics(r),
    )
    return model, metrics


def _with_targets(batch: A.Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids (B, T), targets (B, T-1)) for ``posbench.engine.train``: the next tokens, IGNORE
    (-100, cross_entropy's ignore_index) outside the answer, so the loss is the answer's alone."""
    targets = batch.tokens[:, 1:].copy()
    targets[:, ~batch.answer_mask] = IGNORE
    return torch.from_numpy(batch.tokens), torch.from_numpy(targets)


@torch.no_grad()
def exact_match(model, batch: A.Batch, device, batch_size: int) -> np.ndarray:
    """(rows,) bool: whether greedy decoding would write each row's whole answer exactly
    (``token_hits(...).all(axis=1)``)."""
    return token_hits(model, batch, device, batch_size).all(axis=1)


@torch.no_grad()
def token_hits(model, batch: A.Batch, device, batch_size: int) -> np.ndarray:
    """(rows, answer tokens) bool: whether the argmax given the true prefix is the true token.

    A row is right as a whole (exact match) when all its tokens are: greedy decoding reproduces
    the answer exactly if and only if, at
    every answer position, the argmax given the true prefix is the true token (by induction: up to
    the first miss the decoded prefix is the true one). So the exact match equals decoding through
    the KV cache (tested) for every method whose incremental decoding equals its full forward (the
    conformance kit checks that), at the cost of one forward.
    """
    a = batch.answer
    out = []
    for i in range(0, len(batch.tokens), batch_size):
        tokens = torch.from_numpy(batch.tokens[i : i + batch_size]).to(device)
        logits = model(tokens[:, : a.stop - 1])  # (B, a.stop - 1, V): positions that predict the answer
        pred = logits[:, a.start - 1 : a.stop - 1].argmax(-1)  # (B, m)
        out.append(pred == tokens[:, a])
    return torch.cat(out).cpu().numpy()


def eval_length(model, task: A.AlgoTask, n: int, s, device) -> dict:
    """One cell: exact-match outcomes of ``s.eval_samples`` fresh examples of length ``n``, and
    the answer tokens right (Ruoss et al.'s per-token accuracy); an out-of-memory becomes the
    cell's status, the other lengths go on."""
    cell = {"n": n, "correct": 0, "total": 0, "token_correct": 0, "token_total": 0, "status": "ok", "message": ""}
    batch = A.generate(task.name, n, s.eval_samples, A.EVAL_SEED + s.seed)
    try:
        hits = token_hits(model, batch, device, s.eval_batch_size)  # (rows, answer tokens)
    except (MemoryError, torch.cuda.OutOfMemoryError) as exc:
        text = str(exc).splitlines()
        cell.update(status="oom", message=f"{type(exc).__name__}: {text[0] if text else ''}")
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()
        return cell
    whole = hits.all(axis=1)
    cell.update(correct=int(whole.sum()), total=int(whole.size), token_correct=int(hits.sum()), token_total=int(hits.size))
    return cell
