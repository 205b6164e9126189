"""The extrapolation task's declaration: its grid point, metrics and ``TASK``; its settings are the
train-then-evaluate protocol's block (``posbench.protocols.train_eval.settings``), run in full."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from posbench.core.registry import register_task
from posbench.core.task import Metric, Task
from posbench.protocols.attention_diagnostics import attention_declarations
from posbench.protocols.train_eval.evaluations import compare_values
from posbench.protocols.train_eval.settings import TRAINED_MODEL_METRICS, Settings
from posbench.protocols.training import BUDGET_METRICS
from posbench.tasks.extrapolation.report import REPORT_ORDER, report_sections, summary_tables
from posbench.tasks.extrapolation.run import run

METRICS = {
    "ppl_at_train_len": Metric(
        title="Perplexity at L_train",
        unit="perplexity",
        doc="perplexity at L_valid = L_train, non-overlapping",
        higher_is_better=False,
        fmt="ppl",
    ),
    "ppl_at_max_len": Metric(
        title="Perplexity at the longest L_valid",
        unit="perplexity",
        doc="perplexity at the longest L_valid, non-overlapping",
        higher_is_better=False,
        fmt="ppl",
    ),
    "ppl@*": Metric(
        title="Perplexity",
        unit="perplexity",
        doc="ppl@<mode>@<L_valid>[@interp]: perplexity of one evaluation",
        higher_is_better=False,
        fmt="ppl",
    ),
    "best_ppl": TRAINED_MODEL_METRICS["best_ppl"],
    "best_ppl_eval": Metric(
        title="Source perplexity on the evaluated tokens",
        unit="perplexity",
        doc="perplexity of the true source on the evaluated tokens (synthetic sources), "
        "else null; each cell of series.evals has its own, series.best_per_position_loss the curves",
        higher_is_better=None,
        fmt="ppl",
    ),
    **{k: m for k, m in TRAINED_MODEL_METRICS.items() if k != "best_ppl"},
    "n_seeds": Metric(
        title="Seeds",
        unit="",
        doc="seeds averaged (with `seeds`): every metric m is their mean, m_std the spread, "
        "m_seed_lo/m_seed_hi its 95% t interval over seeds",
        higher_is_better=None,
        fmt="int",
    ),
    "ppl_far@*": Metric(
        title="Perplexity of copies from beyond L_train",
        unit="perplexity",
        doc="ppl_far@<L_valid> (by_distance): perplexity of the tokens copied from more than L_train back, "
        "inside the window; series.by_distance has every bucket",
        higher_is_better=False,
        fmt="ppl",
    ),
    "bound_far@*": Metric(
        title="Source perplexity of copies from beyond L_train",
        unit="perplexity",
        doc="bound_far@<L_valid>: the true source's perplexity on the tokens of ppl_far",
        higher_is_better=None,
        fmt="ppl",
        shown_in="ppl_far@*",
    ),
    "copy_gain_far@*": Metric(
        title="Copy gain beyond L_train",
        unit="",
        doc="copy_gain_far@<L_valid> (by_distance): the share of the source's advantage the model realises on "
        "copies from beyond L_train, against its own loss on copies it cannot see (0 ignores them, 1 the source)",
        higher_is_better=True,
        fmt="plain",
    ),
    "copy_gain_far_matched@*": Metric(
        title="Copy gain beyond L_train, position-matched",
        unit="",
        doc="copy_gain_far_matched@<L_valid> (by_distance): copy_gain_far against the loss of the copies it cannot "
        "see at the same window positions (binned), not at the early positions where those copies sit",
        higher_is_better=True,
        fmt="plain",
    ),
    "copy_gain_within_matched": Metric(
        title="Copy gain within L_train, position-matched",
        unit="",
        doc="by_distance: copy_gain_within against the position-matched reference (the dependency report's gate)",
        higher_is_better=True,
        fmt="plain",
    ),
    "copy_gain_within": Metric(
        title="Copy gain within L_train",
        unit="",
        doc="by_distance: the copy gain on the copies within L_train at L_valid = L_train (the learn-first gate)",
        higher_is_better=True,
        fmt="plain",
    ),
    "copies_learnt": Metric(
        title="Learnt to copy",
        unit="",
        doc="by_distance: 1 when copy_gain_within reaches 0.5 (unmatched; the copy-gain table gates on the matched gain)",
        higher_is_better=None,
        fmt="int",
    ),
    "passkey@*": Metric(
        title="Passkey accuracy",
        unit="",
        doc="passkey@<L_valid>[@interp]: share of text passkey probes answered exactly (pretrained checkpoints, --model hf:DIR)",
        higher_is_better=True,
        fmt="plain",
    ),
    "decode_tpot_ms@*": Metric(
        title="Decode time per token",
        unit="ms",
        doc="decode_tpot_ms@<L_valid>: one greedy decode step with a "
        "KV cache at context L_valid, batch 1, median over decode_repeats of each repeat's median "
        "(decode_tokens steps; the frontier's decode cost)",
        higher_is_better=False,
        fmt="ms",
    ),
    "decode_tpot_ms_min@*": Metric(
        title="Decode time per token, fastest repeat",
        unit="ms",
        doc="decode_tpot_ms_min@<L_valid>: the fastest repeat's median decode step",
        higher_is_better=None,
        fmt="ms",
    ),
    "decode_tpot_ms_max@*": Metric(
        title="Decode time per token, slowest repeat",
        unit="ms",
        doc="decode_tpot_ms_max@<L_valid>: the slowest repeat's median decode step",
        higher_is_better=None,
        fmt="ms",
    ),
    "decode_ttft_ms@*": Metric(
        title="Prefill time",
        unit="ms",
        doc="decode_ttft_ms@<L_valid>: prefill of a (1, L_valid) prompt, median over decode_repeats",
        higher_is_better=False,
        fmt="ms",
    ),
    **attention_declarations(Metric),
    **BUDGET_METRICS,
}


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    L_train: int = Field(ge=2, description="training length")


TASK = register_task(
    Task(
        Settings,
        Params,
        METRICS,
        run,
        REPORT_ORDER=REPORT_ORDER,
        report_sections=report_sections,
        summary_tables=summary_tables,
        compare_values=compare_values,
        name="extrapolation",
    )
)
