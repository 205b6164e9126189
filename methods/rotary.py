"""Rotary position embeddings (Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary
Position Embedding").

Each pair of channels (i, i + hd/2) of q and k is rotated by the angle p * theta_i with
theta_i = 10000^(-2i/hd), so q_m . k_n depends on m - n only. Values are not rotated. cos/sin for
integer positions come from a table that grows on demand; float positions (interpolation, as in
Chen et al. 2023 "Position Interpolation") are computed directly.

Scaling for evaluation beyond the training length L_train (option ``scaling``; none by default).
Each applies in evaluation mode only (``model.eval()``); training is plain rotary and records
L_train (the longest training sequence, a persistent buffer, so a checkpoint keeps it) unless the
option ``train_len`` gives it. The factor s is the option ``factor`` (static), or with ``factor``
null s = max(1, L / L_train) for the evaluation length L (the last key position + 1; under
KV-cache decoding, the length so far): the "dynamic" form, 1 within L_train.
  * ``pi`` - Position Interpolation (Chen, Wong, Chen, Tian 2023, "Extending Context Window of
    Large Language Models via Positional Interpolation"): angle (p / s) * theta_i.
  * ``ntk`` - NTK-aware scaling (bloc97 2023, "NTK-Aware Scaled RoPE", r/LocalLLaMA): the base
    becomes base * s^(d / (d - 2)), so the lowest frequency is interpolated by s and the highest
    is kept. A static factor needs no L_train.
  * ``dynamic_ntk`` - Dynamic NTK (emozilla 2023, "Dynamically Scaled RoPE", r/LocalLLaMA): ``ntk``
    recomputed per length. ``factor`` null: s = max(1, L / L_train). ``factor`` f: Hugging Face's
    convention (transformers' ``_compute_dynamic_ntk_parameters``), s = max(1, f L / L_train - (f - 1));
    f = 1 is the null form.
  * ``yarn`` - YaRN (Peng, Quesnelle, Fan, Shippole 2024, "YaRN: Efficient Context Window Extension
    of Large Language Models", ICLR): theta_i' = (1 - g_i) theta_i / s + g_i theta_i with a ramp g_i
    (1: keep the pair, 0: interpolate it) and the attention temperature sqrt(1/t) = 0.1 ln(s) + 1 on
    q and k (cos and sin). ``yarn_ramp`` "index" (default): the YaRN authors' code and Hugging Face's
    ``_compute_yarn_parameters``, linear in the pair index i between the pairs that turn beta = 32
    (``yarn_beta``, beta_fast) and alpha = 1 (``yarn_alpha``, beta_slow) times within L_train,
    floored and ceiled: g_i = 1 - clamp((i - lo) / (hi - lo), 0, 1). "ratio": the paper's formula,
    linear in r_i = L_train / lambda_i (wavelength lambda_i = 2 pi / theta_i), g_i = clamp((r_i - alpha)
    / (beta - alpha), 0, 1). With factor null this is the paper's Dynamic-YaRN.
Until L_train is known (a fresh model that never trained, no ``train_len``) a null factor is 1.
Registered rows: ``rotary_pi``, ``rotary_ntk`` (static factor 8, bloc97's zero-shot setting),
``rotary_dynamic_ntk``, ``rotary_yarn`` (dynamic), each taking ``factor``, ``train_len``, ``base``;
``rotary_llama3`` and ``rotary_longrope`` subclass ``Rotary`` in their own files
(``scaled_inv_freq`` is the one hook a scaling overrides). Do not combine them with the
extrapolation task's ``interpolate`` (positions already scaled).
"""

import math
from typing import NamedTuple

import torch
from torch.autograd.function import once_differentiable

from posbench.core import causal
from posbench.core.method import PositionCache, PositionMethod
from posbench.core.registry import register, register_variants


class RotaryState(NamedTuple):
    """What ``prepare`` hands every layer: cos, sin (T, hd/2) in the compute dtype and whether
    ``encode_qk`` rotates (cos/sin of q_pos: the KV cache then holds rotated keys) or ``attend``
    rotates q and every key (cos/sin of k_pos: dynamic scaling, whose angles depend on the length
    so far, so a key rotated earlier would be wrong now)."""

    cos: torch.Tensor
    sin: torch.Tensor
    in_encode: bool


@register
class Rotary(PositionMethod):
    name = "rotary"
    # The scalings this class computes (a subclass for another scaling names its own) and those
    # whose angles depend on the evaluation length whatever the factor (so keys are rotated per step).
    scalings = ("none", "pi", "ntk", "dynamic_ntk", "yarn")
    length_dependent = ("dynamic_ntk",)

    # The options are the method's as a suite names them (method_options, read from this signature)
    def __init__(  # noqa: PLR0913
        self,
        cfg,
        base: float = 10000.0,
        scaling: str = "none",
        factor: float | None = None,
        train_len: int | None = None,
        yarn_alpha: float = 1.0,
        yarn_beta: float = 32.0,
        yarn_ramp: str = "index",
    ):
        super().__init__(cfg)
        hd = cfg.head_dim
        if hd % 2:
            raise ValueError(f"{self.name} needs an even head_dim, got {hd}")
        _check_scaling(self.name, self.scalings, scaling, factor, train_len)
        _check_yarn(yarn_alpha, yarn_beta, yarn_ramp)
        self.base, self.scaling, self.factor, self.train_len = float(base), scaling, factor, train_len
        self.yarn_alpha, self.yarn_beta, self.yarn_ramp = float(yarn_alpha), float(yarn_beta), yarn_ramp
        if scaling != "none":
            # Longest training sequence seen (0: none yet); persistent, so checkpoints keep it.
            self.register_buffer("trained_len", torch.zeros((), dtype=torch.long))
            self.trained_len_read = 0  # its value as a compiled evaluation reads it (``known_train_len``)
        inv_freq = base ** (-torch.arange(0, hd, 2, dtype=torch.float32) / hd)  # (hd/2,)
        self.register_position_buffer("inv_freq", inv_freq)
        self._cache = PositionCache()

    def _angles(self, pos: torch.Tensor) -> torch.Tensor:
        """(T, hd/2) float32 angles for positions (T,): the same float32 products a table of
        arange * inv_freq would hold, computed for the rows asked (one row per decode step, and
        no read of pos.max() to size a table: no GPU synchronisation)."""
        return pos.to(torch.float32)[:, None] * self.inv_freq[None, :]

    def _cos_sin(self, pos: torch.Tensor, dtype):
        def build():
            ang = self._angles(pos)
            return ang.cos().to(dtype), ang.sin().to(dtype)

        return self._cache.get((pos,), build, extra=(dtype,))

    def known_train_len(self) -> int:
        """L_train: the option ``train_len``, else the longest training sequence seen (0: none)."""
        if self.train_len:
            return self.train_len
        if torch.compiler.is_compiling():
            # A graph cannot read a buffer (a break per forward): it takes the value read when the
            # model last entered eval mode or loaded a state dict, and checks it when it runs.
            torch._assert_async(self.trained_len == self.trained_len_read, TRAINED_LEN_MESSAGE)
            return self.trained_len_read
        return int(self.trained_len)

    def read_trained_len(self) -> None:
        """Copy ``trained_len`` to the Python int a compiled evaluation reads (outside any graph)."""
        if self.scaling != "none" and self.trained_len.device.type != "meta":
            self.trained_len_read = int(self.trained_len)

    def train(self, mode: bool = True):
        super().train(mode)
        if not mode:
            self.read_trained_len()
        return self

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        self.read_trained_len()

    def eval_length(self, k_pos: torch.Tensor) -> int:
        """L: the last key position + 1 (0 without keys); under torch.compile the number of keys,
        the positions being checked to be 0 .. L-1 when the graph runs."""
        if not k_pos.numel():
            return 0
        if torch.compiler.is_compiling():
            # A graph cannot read a position: the shape is a constant of the graph.
            n = k_pos.shape[0]
            torch._assert_async(k_pos[-1] == n - 1, LENGTH_MESSAGE)
            return n
        return int(k_pos[-1]) + 1

    def factor_at(self, length: int, L_train: int) -> float:
        """The factor s at evaluation length ``length`` (keys 0 .. length-1)."""
        f = self.factor
        if f is not None and self.scaling != "dynamic_ntk":
            return float(f)  # static
        if not L_train or length <= 0:
            return 1.0
        if f is None:
            return max(1.0, length / L_train)
        return max(1.0, f * length / L_train - (f - 1))  # Hugging Face's dynamic NTK

    def scale_factor(self, k_pos: torch.Tensor) -> tuple[float, int]:
        """(s, L_train) for evaluation at key positions ``k_pos`` (eager: reads two numbers to the
        host, once per positions tensor)."""
        L_train = self.known_train_len()
        return self.factor_at(self.eval_length(k_pos), L_train), L_train

    def base_inv_freq(self) -> torch.Tensor:
        """(hd/2,) float64 theta_i = base^(-2i/hd), the unscaled frequencies."""
        hd = self.cfg.head_dim
        i2 = torch.arange(0, hd, 2, dtype=torch.float64, device=self.inv_freq.device)
        return self.base ** (-i2 / hd)

    def scaled_inv_freq(self, s: float, L_train: int, length: int | None = None) -> tuple[torch.Tensor, float]:
        """(theta' (hd/2,) float64 per position, attention factor on q and k) for factor s at
        evaluation length ``length`` (the one hook a subclass's scaling overrides)."""
        hd = self.cfg.head_dim
        theta = self.base_inv_freq()
        if self.scaling == "pi":
            return theta / s, 1.0
        if self.scaling in ("ntk", "dynamic_ntk"):
            i2 = torch.arange(0, hd, 2, dtype=torch.float64, device=theta.device)
            return (self.base * s ** (hd / (hd - 2))) ** (-i2 / hd), 1.0
        if self.scaling == "none":
            return theta, 1.0
        # yarn: "NTK-by-parts" interpolation plus the attention temperature
        self.need_train_len(s, L_train)
        if s == 1.0:
            return theta, 1.0
        keep = yarn_keep(theta, self.base, L_train, self.yarn_alpha, self.yarn_beta, self.yarn_ramp)  # g_i
        return (1 - keep) * theta / s + keep * theta, 0.1 * math.log(s) + 1.0

    def need_train_len(self, s: float, L_train: int) -> None:
        if s > 1.0 and not L_train:
            raise ValueError(
                f"{self.name}: scaling {self.scaling!r} needs L_train for its ramp; allowed: set "
                "train_len, or train the model first"
            )

    def frequencies(self, length: int) -> tuple[torch.Tensor, float]:
        """(theta' (hd/2,) float64, attention factor) this method rotates by when it evaluates
        ``length`` tokens (positions 0 .. length-1) in evaluation mode: what a reference is checked
        against (``bench.py verify``)."""
        if self.scaling == "none":
            return self.base_inv_freq(), 1.0
        L_train = self.known_train_len()
        return self.scaled_inv_freq(self.factor_at(length, L_train), L_train, length)

    def _scaled_cos_sin(self, pos: torch.Tensor, k_pos: torch.Tensor, dtype):
        """cos, sin (T, hd/2) of the scaled angles at ``pos``, with the factor for a model whose
        keys are at ``k_pos`` (dynamic scaling: the length so far)."""

        def build():
            s, L_train = self.scale_factor(k_pos)
            theta, mscale = self.scaled_inv_freq(s, L_train, self.eval_length(k_pos))
            ang = pos.to(torch.float64)[:, None] * theta[None, :]
            return (ang.cos() * mscale).to(dtype), (ang.sin() * mscale).to(dtype)

        return self._cache.get((pos, k_pos, self.trained_len), build, extra=(dtype, "scaled"))

    @staticmethod
    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x (B, H, T, hd); cos, sin (T, hd/2). Rotates channel pairs (i, i + hd/2)."""
        return _RotateQK.apply(x, None, cos, sin)[0]

    def dynamic(self) -> bool:
        """Whether the angles depend on the evaluation length (scaled, eval mode, a null factor
        or a scaling whose factor is always per length)."""
        if self.scaling == "none" or self.training:
            return False
        return self.factor is None or self.scaling in self.length_dependent

    def _state(self, q_pos, k_pos, dtype, in_encode: bool) -> RotaryState:
        pos = q_pos if in_encode else k_pos
        if self.scaling != "none" and not self.training:
            return RotaryState(*self._scaled_cos_sin(pos, k_pos, dtype), in_encode)
        return RotaryState(*self._cos_sin(pos, dtype), in_encode)

    def prepare(self, q_pos, k_pos, dtype) -> RotaryState:
        if self.scaling != "none" and self.training:
            self.trained_len.clamp_(min=k_pos.shape[0])  # on the device: no host sync
        return self._state(q_pos, k_pos, dtype, in_encode=not self.dynamic())

    def encode_qk(self, q, k, layer, state: RotaryState):
        if not state.in_encode:
            return q, k
        return _RotateQK.apply(q, k, state.cos, state.sin)

    def attend(self, q, k, v, q_pos, k_pos, layer, state: RotaryState | None = None):
        if state is None:  # raw q, k outside a model forward: rotate them all here
            state = self._state(q_pos, k_pos, q.dtype, in_encode=False)
        if not state.in_encode:
            # cos/sin of k_pos; q_pos is the tail of k_pos, so the queries' are the tail of the keys'.
            q, k = _RotateQK.apply(q, k, state.cos, state.sin)
        return causal.causal_sdpa(q, k, v, window=self.window(layer))  # the faster path per length


YARN_RAMPS = ("index", "ratio")
LENGTH_MESSAGE = (
    "compiled scaled rotary evaluation takes key positions as 0 .. L-1 (the model's own); allowed: "
    "those positions, or an eager model"
)
TRAINED_LEN_MESSAGE = (
    "compiled scaled rotary: trained_len changed after the model entered eval mode; allowed: "
    "call model.eval() again after changing it"
)


def yarn_keep(theta: torch.Tensor, base: float, L_train: int, alpha: float, beta: float, ramp: str) -> torch.Tensor:
    """YaRN's g_i (hd/2,) float64: 1 keeps pair i's frequency, 0 divides it by s.

    "index": the YaRN authors' ``find_correction_range`` / ``linear_ramp_mask`` (Hugging Face's
    ``_compute_yarn_parameters``, ``truncate`` on): the fractional pair index at which a pair turns
    n times within L_train is d ln(L_train / (2 pi n)) / (2 ln base); lo = floor of it for n = beta,
    hi = ceil for n = alpha, clipped to [0, d - 1] as they clip it, and g falls linearly from 1 at
    pair lo to 0 at pair hi. "ratio": the paper's eq. 18, linear in r_i = L_train / lambda_i."""
    if ramp == "ratio":
        ratio = L_train / (2 * math.pi / theta)  # r_i: wavelengths of pair i within L_train
        return ((ratio - alpha) / (beta - alpha)).clamp(0.0, 1.0)
    d = 2 * theta.shape[0]

    def pair_turning(n: float) -> float:
        return d * math.log(L_train / (n * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = max(math.floor(pair_turning(beta)), 0), min(math.ceil(pair_turning(alpha)), d - 1)
    if lo == hi:
        hi += 0.001  # as the reference code: no division by zero
    i = torch.arange(theta.shape[0], dtype=torch.float64, device=theta.device)
    return 1.0 - ((i - lo) / (hi - lo)).clamp(0.0, 1.0)


SCALINGS = Rotary.scalings


def _check_scaling(name, scalings, scaling, factor, train_len) -> None:
    if scaling not in scalings:
        raise ValueError(
            f"{name}: scaling must be one of {', '.join(scalings)}, got {scaling!r} (Llama 3.1's and "
            "LongRoPE's scalings are the methods rotary_llama3 and rotary_longrope)"
        )
    if factor is not None and not (isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor >= 1):
        raise ValueError(f"{name}: factor must be a number >= 1 or null (per evaluation length), got {factor!r}")
    if train_len is not None and not (isinstance(train_len, int) and not isinstance(train_len, bool) and train_len >= 1):
        raise ValueError(f"{name}: train_len must be a positive integer or null (recorded in training), got {train_len!r}")


def _check_yarn(yarn_alpha, yarn_beta, yarn_ramp) -> None:
    if not 0 < yarn_alpha < yarn_beta:
        raise ValueError(f"rotary: need 0 < yarn_alpha < yarn_beta, got {yarn_alpha!r} and {yarn_beta!r}")
    if yarn_ramp not in YARN_RAMPS:
        raise ValueError(
            f"rotary: yarn_ramp must be one of {', '.join(YARN_RAMPS)} (the authors' code, the paper's "
            f"formula), got {yarn_ramp!r}"
        )


# The scaled rows: ``rotary`` with one scaling fixed (and, for ``rotary_ntk``, the factor's
# default); their other options (factor, train_len, base) stay settable. A literal table, so that
# listing methods reads the names from this file instead of importing torch.
SCALED = {
    "rotary_pi": {"scaling": "pi", "factor": None},  # position interpolation
    "rotary_ntk": {"scaling": "ntk", "factor": 8.0},  # static NTK-aware base, bloc97's factor 8
    "rotary_dynamic_ntk": {"scaling": "dynamic_ntk", "factor": None},  # the base grows with the length
    "rotary_yarn": {"scaling": "yarn", "factor": None},  # per-frequency interpolation and temperature
}


def scaled_variant(name: str, fixed: dict) -> type[Rotary]:
    """The method class of one row of ``SCALED``: ``rotary`` with ``fixed["scaling"]``, and
    ``fixed["factor"]`` as the default of its option ``factor``."""
    scaling, default_factor = fixed["scaling"], fixed["factor"]

    class ScaledRotary(Rotary):
        def __init__(self, cfg, factor: float | None = default_factor, train_len: int | None = None, base: float = 10000.0):
            super().__init__(cfg, base=base, scaling=scaling, factor=factor, train_len=train_len)

    ScaledRotary.name = name
    ScaledRotary.__name__ = ScaledRotary.__qualname__ = f"Rotary_{scaling}"
    ScaledRotary.__doc__ = f"rotary with scaling={scaling!r} (factor {default_factor} unless set)"
    return ScaledRotary


register_variants(SCALED, scaled_variant)


def _rotated(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, sign: float) -> torch.Tensor:
    """A new contiguous tensor: x rotated by +angle (sign 1) or -angle (sign -1) per channel pair
    (i, i + hd/2): (x1 cos - sign x2 sin, x2 cos + sign x1 sin). Each half is written in place,
    two kernels per half and no concatenation."""
    t = x.shape[-2]
    if t != cos.shape[-2]:  # queries when Tq < Tk: the tail of the key positions
        cos, sin = cos[cos.shape[-2] - t :], sin[sin.shape[-2] - t :]
    half = x.shape[-1] // 2
    x1, x2 = x.split(half, dim=-1)
    if torch.compiler.is_compiling():
        # The same formula, out of place: dynamo cannot trace out= into a view (a graph break per
        # layer), and the compiler fuses these elementwise ops into one kernel anyway.
        return torch.cat((x1 * cos - sign * x2 * sin, x2 * cos + sign * x1 * sin), dim=-1)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    o1, o2 = out.split(half, dim=-1)
    torch.mul(x1, cos, out=o1).addcmul_(x2, sin, value=-sign)
    torch.mul(x2, cos, out=o2).addcmul_(x1, sin, value=sign)
    return out


class _RotateQK(torch.autograd.Function):
    """Rotary rotation of q and (optionally) k in one autograd node.

    Rotation is orthogonal, so the gradient is the upstream gradient rotated back by -angle:
    nothing but the (T, hd/2) cos/sin is saved for backward, and forward and backward are four
    elementwise kernels per tensor instead of the seven (and seven more in backward) of
    chunk / multiply / subtract / add / cat.
    """

    @staticmethod
    def forward(ctx, q, k, cos, sin):
        ctx.save_for_backward(cos, sin)
        ctx.has_k = k is not None
        return _rotated(q, cos, sin, 1.0), (_rotated(k, cos, sin, 1.0) if k is not None else None)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_q, grad_k):
        cos, sin = ctx.saved_tensors
        gq = _rotated(grad_q, cos, sin, -1.0) if grad_q is not None and ctx.needs_input_grad[0] else None
        gk = None
        if ctx.has_k and grad_k is not None and ctx.needs_input_grad[1]:
            gk = _rotated(grad_k, cos, sin, -1.0)
        return gq, gk, None, None
