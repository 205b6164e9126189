"""The retrieval task's declaration: its settings, grid point, metrics and ``TASK``."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from posbench.core.registry import register_task
from posbench.core.task import Metric, Task
from posbench.protocols.attention_diagnostics import attention_declarations
from posbench.protocols.training import BUDGET_METRICS, CorpusSettings, TrainSettings
from posbench.tasks.retrieval.report import report_sections, summary_tables
from posbench.tasks.retrieval.run import run

METRICS = {
    "acc_at_train_len": Metric(
        title="Accuracy at L_train",
        unit="fraction",
        doc="fraction of answers exactly right at L_valid = L_train (RULER's probes: by their scoring rule)",
        higher_is_better=True,
        fmt="plain",
        shown_in="acc@*",
    ),
    "acc_at_max_len": Metric(
        title="Accuracy at the longest L_valid",
        unit="fraction",
        doc="accuracy at the longest L_valid",
        higher_is_better=True,
        fmt="plain",
        shown_in="acc@*",
    ),
    "effective_length": Metric(
        title="Effective length",
        unit="tokens",
        doc="longest L_valid with accuracy >= threshold at it and "
        "every shorter L_valid (RULER); none when the task was not learnt at L_train",
        higher_is_better=True,
        fmt="int",
        shown_in="acc@*",
    ),
    "effective_length_rel": Metric(
        title="Effective length, relative",
        unit="tokens",
        doc="longest L_valid >= L_train with accuracy >= relative_threshold x the "
        "model's own accuracy at L_train at it and every shorter L_valid; none when the task was not learnt",
        higher_is_better=True,
        fmt="int",
        shown_in="acc@*",
    ),
    "wavg_long": Metric(
        title="Weighted accuracy, towards long",
        unit="fraction",
        doc="RULER's wAvg (inc): accuracy averaged over L_valid with weights 1..n from the shortest to the longest",
        higher_is_better=True,
        shown_in="acc@*",
    ),
    "wavg_short": Metric(
        title="Weighted accuracy, towards short",
        unit="fraction",
        doc="RULER's wAvg (dec): accuracy averaged over L_valid with weights n..1 from the shortest to the longest",
        higher_is_better=True,
        shown_in="acc@*",
    ),
    "learned": Metric(
        title="Learnt at L_train",
        unit="",
        doc="1 when accuracy at L_train >= learned_threshold (learn first, then compare), else 0",
        higher_is_better=None,
        fmt="int",
        appendix=False,
        shown_in="acc@*",
    ),
    "acc@*": Metric(
        title="Accuracy",
        unit="fraction",
        doc="acc@<L_valid>: fraction of answers exactly right (counts summed over depths); RULER's probes by the "
        "setting scoring, string_match_all by default: the share of the reference items found (series.scoring)",
        higher_is_better=True,
    ),
    "acc_lo@*": Metric(title="Accuracy, Wilson 95% lower bound", unit="fraction", doc="acc_lo@<L_valid>", higher_is_better=None),
    "acc_hi@*": Metric(title="Accuracy, Wilson 95% upper bound", unit="fraction", doc="acc_hi@<L_valid>", higher_is_better=None),
    "chance": Metric(
        title="Chance accuracy",
        unit="fraction",
        doc="accuracy of uniform guessing over the answer symbols, under the probe's scoring rule",
        higher_is_better=None,
    ),
    "final_train_loss": Metric(
        title="Final training loss", unit="nats/token", doc="training loss at the last step (LM text and probes)"
    ),
    "train_steps": Metric(title="Training steps", unit="steps", doc="optimizer steps", higher_is_better=None, fmt="int"),
    "stopped_at_step": Metric(
        title="Stopped at step",
        unit="steps",
        doc="train to criterion (stop_at_acc): the step where the held-out "
        "accuracy at L_train reached stop_at_acc and training stopped; none when it trained the "
        "whole budget",
        higher_is_better=None,
        fmt="int",
    ),
    "check_acc": Metric(
        title="Held-out accuracy at the last check",
        unit="fraction",
        doc="teacher-forced exact match of held-out probe "
        "examples at L_train at the last check of stop_at_acc; none without checks or when the model came from "
        "a checkpoint",
        higher_is_better=None,
    ),
    "train_tokens": Metric(title="Training tokens", unit="tokens", doc="tokens trained on", higher_is_better=None, fmt="count"),
    "train_seconds": Metric(
        title="Training time", unit="s", doc="wall-clock training time (s); 0 when the model came from another case's checkpoint"
    ),
    "reused_checkpoint": Metric(
        title="Reused checkpoint", unit="", doc="1 when the model came from a checkpoint", higher_is_better=None, fmt="int"
    ),
    "n_params": Metric(title="Parameters", unit="", doc="parameters of the model", higher_is_better=None, fmt="count"),
    "n_seeds": Metric(
        title="Seeds",
        unit="",
        doc="seeds trained (with `seeds`): every metric m is their mean, m_std the spread, "
        "m_seed_lo/m_seed_hi its 95% t interval over seeds",
        higher_is_better=None,
        fmt="int",
    ),
    "seeds_learnt": Metric(
        title="Seeds learnt",
        unit="",
        doc="with `seeds`: how many seeds learnt the task at L_train (learned is 1 only when all did)",
        higher_is_better=None,
        fmt="int",
        appendix=False,
        shown_in="acc@*",
    ),
    **attention_declarations(Metric),
    **BUDGET_METRICS,
}


ProbeName = Literal["passkey", "mqar", "copy", "reverse", "multikey", "vartrack", "aggregate", "common_words", "frequent_words"]


class Settings(TrainSettings):
    corpus: CorpusSettings = Field(default_factory=CorpusSettings, description="language-model text of the mix")
    batch_size: int = Field(32, ge=1)
    mix: float = Field(0.5, ge=0.0, le=1.0, description="fraction of training rows that are probe examples")
    train_probes: list[ProbeName] = Field(
        list(get_args(ProbeName))[:4],
        min_length=1,
        description="probes in the training mix (one model serves them all); default passkey, mqar, copy, reverse",
    )
    model_per_probe: bool = Field(
        False, description="each probe case trains its own model on its probe alone (train_probes is then not used)"
    )
    n_symbols: int = Field(16, ge=2, description="value alphabet: passkey digits, copy segments, mqar values")
    n_keys: int = Field(16, ge=1, description="mqar: key alphabet, disjoint from the values (Zoology)")
    key_len: int = Field(5, ge=1, description="passkey: symbols in the key")
    n_pairs: int = Field(8, ge=1, description="mqar: key-value pairs")
    n_queries: int = Field(4, ge=1, description="mqar: queries per example")
    segment_len: int = Field(8, ge=1, description="copy/reverse: symbols in the segment")
    filler_len: int = Field(5, ge=1, description="tokens of the repeated filler phrase")
    n_needles: int = Field(4, ge=1, description="multikey: needles, the queried one among distractors (keys distinct)")
    n_values: int = Field(2, ge=1, description="multikey: values per key, all of them the answer")
    needles: Literal["separate", "packed"] = Field(
        "separate",
        description="multikey: one needle per value at its own random depth (RULER's niah), or a key's values "
        "packed in one needle (posbench's earlier, easier form)",
    )
    absent_prob: float = Field(
        0.2,
        ge=0.0,
        le=1.0,
        description="multikey: share of queries for an absent key (answer: END); RULER has none, and the ruler "
        "suite sets 0 (the default stays 0.2 so that the ids of runs that never draw multikey stay)",
    )
    hops: int = Field(2, ge=1, description="vartrack: longest chain; accuracy is reported per hops 1..hops (the axis)")
    n_chains: int = Field(2, ge=1, description="vartrack: chains, the queried one and distractors")
    n_top: int = Field(
        1,
        ge=1,
        description="the words asked for: common_words' common words (RULER: 10), frequent_words' ranks "
        "2..n_top+1 (RULER: 3), aggregate's most frequent words, most frequent first",
    )
    scoring: Literal["string_match_all", "string_match_part", "exact"] = Field(
        "string_match_all",
        description="how RULER's probes' answers are scored: RULER's string_match_all (the share of the reference "
        "items found anywhere in the answer), string_match_part (1 when any is), or exact (the whole answer in "
        "order); passkey, mqar, copy and reverse are always scored exactly",
    )
    train_queries: int = Field(
        1,
        ge=1,
        description="multikey and vartrack training examples: questions asked in turn, each followed by its answer, "
        "the last drawn as the evaluation's single one (evaluation and the held-out checks ask one)",
    )
    L_valid_factors: list[Annotated[int, Field(ge=1)]] = Field(
        [1, 2, 4, 8, 16], min_length=1, description="L_valid = factor * L_train"
    )
    depths: list[float] = Field(
        [0.0, 0.25, 0.5, 0.75, 1.0], min_length=1, description="passkey: needle depths of the heatmap (0 = start, 1 = end)"
    )
    eval_samples: int = Field(100, ge=1, description="answers scored per L_valid (passkey: split over depths)")
    eval_batch_size: int = Field(16, ge=1)
    threshold: float = Field(0.5, ge=0.0, le=1.0, description="accuracy an L_valid needs for effective_length")
    relative_threshold: float = Field(
        0.8,
        gt=0.0,
        le=1.0,
        description="effective_length_rel: the share of its own accuracy at L_train an L_valid must keep",
    )
    learned_threshold: float = Field(
        0.9,
        ge=0.0,
        le=1.0,
        description="accuracy at L_train a model needs to count "
        "as having learnt the task; below it, no effective length is reported",
    )
    loss: Literal["all", "answers", "predictable"] = Field(
        "all",
        description="training loss of probe rows: every token, the answers only, or every token but the "
        "random draws outside the answers (needle symbols, mqar keys and values); language-model rows keep every token",
    )
    reuse_checkpoint: bool = Field(True, description="evaluate an existing checkpoint instead of retraining")
    stop_at_acc: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="train to criterion: stop once the exact-match accuracy of held-out "
        "probe examples at L_train (teacher-forced, which equals greedy decoding's) reaches this, checked every "
        "check_every steps; the budget stays the cap and sets the lr schedule. None: train the whole budget",
    )
    attention_diagnostics: bool = Field(
        False,
        description="also the attention's entropy (and its ratio to log of the keys), first-token mass and "
        "mass by distance, per layer and head at each L_valid, on the probe's examples (series.attention)",
    )
    attention_sequences: int = Field(4, ge=1, description="attention_diagnostics: probe examples per L_valid")
    attention_max_factor: int = Field(8, ge=1, description="attention_diagnostics: the longest L_valid probed, x L_train")
    check_every: int = Field(100, ge=1, description="steps between the held-out checks of stop_at_acc")
    check_samples: int = Field(200, ge=1, description="held-out examples per check (mqar: scored per query)")

    @model_validator(mode="after")
    def _check(self):
        if any(not 0.0 <= d <= 1.0 for d in self.depths):
            raise ValueError(f"depths must lie in [0, 1], got {self.depths}")
        self.probe_config()  # one line on inconsistent probe shapes
        return self

    def probe_config(self):
        """posbench.protocols.probing.probes.ProbeConfig of these settings (it checks the shapes agree)."""
        from posbench.core.config import ProbeConfig

        return ProbeConfig(
            n_symbols=self.n_symbols,
            key_len=self.key_len,
            n_pairs=self.n_pairs,
            n_queries=self.n_queries,
            segment_len=self.segment_len,
            filler_len=self.filler_len,
            n_keys=self.n_keys,
            n_needles=self.n_needles,
            n_values=self.n_values,
            absent_prob=self.absent_prob,
            hops=self.hops,
            n_chains=self.n_chains,
            n_top=self.n_top,
            needles=self.needles,
        )


def check_grid(settings: Settings, grid: dict) -> tuple[str, str, str] | None:
    """The first setting a probe the suite draws cannot fit (RULER's shapes against their
    alphabets): the grid's probes, and the training mix's when one model serves them all."""
    drawn = list(grid.get("probe", [])) + ([] if settings.model_per_probe else list(settings.train_probes))
    cfg = settings.probe_config()
    for probe in dict.fromkeys(drawn):
        misfit = cfg.ruler_misfit(probe)
        if misfit is not None:
            return misfit
    return None


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    L_train: int = Field(ge=2, description="training length")
    probe: ProbeName = Field(description="retrieval probe evaluated")


TASK = register_task(
    Task(
        Settings=Settings,
        Params=Params,
        METRICS=METRICS,
        run=run,
        report_sections=report_sections,
        summary_tables=summary_tables,
        check_grid=check_grid,
        name="retrieval",
    )
)
