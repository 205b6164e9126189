"""PaTH: position encoding by accumulated Householder transforms (Yang, Shen, Wen, Tan, Mishra,
Ren, Panda, Kim 2025, "PaTH Attention: Position Encoding via Accumulating Householder
Transformations", NeurIPS; arXiv 2505.16381), and PaTH-FoX, PaTH with FoX's forget gates.

Every token t defines a transform H_t = I - beta_t w_t w_t^T (w_t a unit vector, beta_t in (0, 2),
so H_t is a reflection at beta 2 and a projection at beta 1). A key reaches a later query through
the transforms of the tokens between them, instead of a rotation by their distance:

    score_ij = q_i^T H_i H_{i-1} ... H_{j+1} k_j / sqrt(hd)     (j <= i; j = i: q_i . k_i)

and attention is the softmax of the scores. The authors' layer (flash-linear-attention,
fla-org/flash-linear-attention ``fla/layers/path_attn.py``, commit 27289fcb) makes w and beta from
the layer input x: w = l2norm(silu(conv3(W_up W_down x))) per key head (rank 32 under multi-head
attention, one full map under GQA; ``conv3`` a causal depthwise convolution over the last 3 tokens),
beta = 2 sigmoid(W_b x + b) per key head. A method sees a layer's raw keys, not x; every key head's
raw key together, k_t = W_k LN(x_t) + b_k, is an affine image of the normed input (all of it where
W_k is invertible, as under multi-head attention), so ``w_source: input`` (the default) reads them
where fla reads x: the same family of maps, as fox's gate does. ``w_source: key`` is posbench's
first form, each key head's own raw key through an hd x hd map (identity at start) and
beta_t = 2 sigmoid(u . k_t + b); ``short_conv`` (true, the authors') adds the convolution to either.
b starts at ``beta_bias`` (0).

``path_fox`` adds FoX's forget gate (methods/fox.py) per query head from the raw keys of every key
head, log f_t = logsigmoid(g_h . k_t + c_h), F = cumsum(log f). ``gate_scale: sqrt_dim`` (the
default) is fla's convention: its reference ``naive_path_attn`` (file ``test_path_attn.py`` of its
``tests/ops``) and its Triton kernel ``parallel_path_fwd`` (``fla/ops/path_attn/parallel_path_fwd.py``),
at commit 27289fcb1edd7f57daac911ea555ba1535893fa3, take ``(s + g_q - g_k) * scale``: the gate is
scaled with the scores, score_ij += (F_i - F_j) / sqrt(hd), a per-token decay of 0.5^(1/sqrt(hd))
at start (0.885 at hd 32). ``gate_scale: none`` is posbench's first form, FoX's unscaled
F_i - F_j (0.5 per token at start: far more local).

Attention runs by the chunked UT transform (``posbench.attention.householder.path_attention``):
``block`` (64) positions per chunk, O(L / block) Python steps, forward and backward through
autograd (the gaps' softmax and values one node with its own backward); its tests compare it with the exact scan ``path_scores``. The KV cache holds each key
with its w (before the convolution and normalisation) and beta (and log f for path_fox) as extra
channels in float32; ``attend`` runs the convolution over the keys it is given, so a decode step
finds every transform between. A layer with a sliding window holds its last ``window`` keys, which
is enough: the convolution's first two outputs there are wrong, but they shape only keys outside
the window. On CUDA with fla-core (``pip install posbench[fla]``), ``kernel: auto`` (the default)
hands whole sequences without a window to flash-linear-attention's Triton kernel
(``fla.ops.path_attn.parallel.parallel_path_attention``); ``kernel: torch`` never does, ``kernel:
fla`` is unavailable without it; ``attn_backend`` names the path taken.
"""

import torch
import torch.nn.functional as F
from torch import nn

from posbench.attention.householder import FLA_HEAD_DIMS, FLA_MISSING, fla_kernel, path_attention
from posbench.core.masked import windowed
from posbench.core.method import PositionMethod
from posbench.core.outcome import Unavailable
from posbench.core.registry import register

W_SOURCES = ("input", "key")
GATE_SCALES = ("sqrt_dim", "none")
KERNELS = ("auto", "torch", "fla")
RANK = 32  # fla's low-rank w map under multi-head attention
CONV = 3  # fla's short convolution: the token and the two before it


def _check(name, key, value, allowed):
    if value not in allowed:
        raise ValueError(f"{name}: {key} must be one of {', '.join(map(str, allowed))}, got {value!r}")


class PaTH(PositionMethod):
    """PaTH, with FoX's forget gates when ``forget`` (the rows ``path`` and ``path_fox``)."""

    forget = False

    def __init__(  # noqa: PLR0913 (the method's options)
        self,
        cfg,
        beta_bias: float = 0.0,
        block: int = 64,
        w_source: str = "input",
        short_conv: bool = True,
        gate_scale: str | None = None,
        kernel: str = "auto",
    ):
        super().__init__(cfg)
        if not isinstance(beta_bias, (int, float)) or isinstance(beta_bias, bool):
            raise ValueError(f"{self.name}: beta_bias must be a number, got {beta_bias!r}")
        if not (isinstance(block, int) and not isinstance(block, bool) and block >= 1):
            raise ValueError(f"{self.name}: block must be a positive integer (positions per block), got {block!r}")
        _check(self.name, "w_source", w_source, W_SOURCES)
        _check(self.name, "short_conv", short_conv, (True, False))
        _check(self.name, "kernel", kernel, KERNELS)
        self.kernel = kernel
        if not self.forget and gate_scale is not None:
            raise ValueError(f"{self.name}: gate_scale applies to path_fox's forget gate only; path has none")
        self.gate_scale = gate_scale or "sqrt_dim"
        _check(self.name, "gate_scale", self.gate_scale, GATE_SCALES)
        self.block, self.w_source, self.short_conv = block, w_source, short_conv
        nl, hd, hkv = cfg.n_layers, cfg.head_dim, cfg.kv_heads
        dkv = hkv * hd
        if w_source == "key":
            eye = torch.eye(hd).expand(nl, hkv, hd, hd)
            self.w_proj = nn.Parameter(eye + torch.randn(nl, hkv, hd, hd) * 0.02)  # (L, Hkv, hd, hd)
            self.beta_u = nn.Parameter(torch.randn(nl, hkv, hd) * 0.02)
        elif hkv == cfg.n_heads:  # fla: rank 32 under multi-head attention
            self.w_down = nn.Parameter(torch.randn(nl, RANK, dkv) * dkv**-0.5)
            self.w_up = nn.Parameter(torch.randn(nl, dkv, RANK) * RANK**-0.5)
            self.beta_w = nn.Parameter(torch.randn(nl, hkv, dkv) * 0.02)
        else:  # fla: one full map under GQA (few key heads)
            self.w_map = nn.Parameter(torch.randn(nl, dkv, dkv) * dkv**-0.5)
            self.beta_w = nn.Parameter(torch.randn(nl, hkv, dkv) * 0.02)
        self.beta_b = nn.Parameter(torch.full((nl, hkv), float(beta_bias)))
        if short_conv:  # depthwise over the Dkv channels, nn.Conv1d's initial range (fla's module is one)
            self.conv = nn.Parameter(torch.empty(nl, dkv, CONV).uniform_(-(CONV**-0.5), CONV**-0.5))
        self.group = cfg.n_heads // hkv
        if self.forget:
            self.gate_w = nn.Parameter(torch.randn(nl, cfg.n_heads, dkv) * 0.02)
            self.gate_b = nn.Parameter(torch.zeros(nl, cfg.n_heads))
        self.extra = hd + 1 + (self.group if self.forget else 0)  # key channels beyond hd in the cache

    def transforms(self, k, layer):
        """w before the convolution and normalisation (B, Hkv, T, hd) and beta (B, Hkv, T), float32
        (float64 for float64 keys), from raw keys (B, Hkv, T, hd): one token at a time."""
        cdt = torch.float64 if k.dtype == torch.float64 else torch.float32
        kf = k.to(cdt)
        b, hkv, t, hd = k.shape
        if self.w_source == "key":
            w = torch.einsum("bhtd,hed->bhte", kf, self.w_proj[layer].to(cdt))
            logit = (kf * self.beta_u[layer].to(cdt)[:, None]).sum(-1)
        else:
            flat = kf.transpose(1, 2).reshape(b, t, hkv * hd)  # every key head's raw key: the layer input as seen here
            if hasattr(self, "w_map"):
                w = flat @ self.w_map[layer].to(cdt).t()
            else:
                w = (flat @ self.w_down[layer].to(cdt).t()) @ self.w_up[layer].to(cdt).t()
            w = w.view(b, t, hkv, hd).transpose(1, 2)
            logit = (flat @ self.beta_w[layer].to(cdt).t()).transpose(1, 2)  # (B, Hkv, T)
        return w, 2 * torch.sigmoid(logit + self.beta_b[layer].to(cdt)[:, None])

    def directions(self, w, layer):
        """The unit w_t (B, Hkv, T, hd) from ``transforms``'s w over the keys in order: the causal
        short convolution and silu when ``short_conv``, then l2-normalised per key head."""
        if self.short_conv:
            b, hkv, t, hd = w.shape
            x = w.permute(0, 1, 3, 2).reshape(b, hkv * hd, t)  # (B, Dkv, T)
            # in w's own dtype (float32, float64) under autocast too: the scan reads w exactly
            with torch.autocast(w.device.type, enabled=False):
                x = F.conv1d(F.pad(x, (CONV - 1, 0)), self.conv[layer].to(w.dtype)[:, None], groups=hkv * hd)
            w = F.silu(x).view(b, hkv, hd, t).permute(0, 1, 3, 2)
        return F.normalize(w, dim=-1)

    def log_gate(self, k, layer):
        """log f (B, Hkv, T, G) for the G query heads of each key head, from raw keys (B, Hkv, T, hd)."""
        cdt = torch.float64 if k.dtype == torch.float64 else torch.float32
        b, hkv, t, hd = k.shape
        flat = k.to(cdt).transpose(1, 2).reshape(b, t, hkv * hd)  # every key head's key
        logits = flat @ self.gate_w[layer].to(cdt).t() + self.gate_b[layer].to(cdt)  # (B, T, H)
        return F.logsigmoid(logits).view(b, t, hkv, self.group).transpose(1, 2)

    def encoded(self, k, layer):
        """Raw keys (B, Hkv, T, hd) -> keys with their w, beta (and log f) appended, in float32
        (float64 for float64 keys) so that a decode step reads them exactly."""
        w, beta = self.transforms(k, layer)
        parts = [k.to(w.dtype), w, beta[..., None]] + ([self.log_gate(k, layer)] if self.forget else [])
        return torch.cat(parts, -1)

    def encode_qk(self, q, k, layer, state=None):
        return q, self.encoded(k, layer)

    def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
        hd = q.shape[-1]
        if k.shape[1] != self.cfg.kv_heads:  # expanded to the query heads: one copy per key head
            k = k[:, :: self.group]
        if v.shape[1] != k.shape[1]:
            v = v[:, :: self.group]
        if k.shape[-1] == hd:  # raw keys: a call outside a model forward
            k = self.encoded(k, layer)
        keys, w, beta = k[..., :hd], self.directions(k[..., hd : 2 * hd], layer), k[..., 2 * hd]  # (B, Hkv, Tk, ...)
        gate = self.forget_sums(k[..., 2 * hd + 1 :]) if self.forget else None  # (B, H, Tk) or None
        scale = hd**-0.5
        fla = self.fla(q.device, q.shape[-2], k.shape[-2], layer)
        if fla is not None:  # fla takes (B, T, heads, ...), key heads as they are, log f per token
            log_f = None if gate is None else torch.diff(gate, prepend=torch.zeros_like(gate[..., :1]))
            if log_f is not None and self.gate_scale == "none":
                log_f = log_f / scale  # fla always scales the gate with the scores
            args = [x.transpose(1, 2).to(q.dtype) for x in (q, keys, v, w)]
            o, _ = fla(
                *args,
                beta.transpose(1, 2).to(q.dtype),
                None if log_f is None else log_f.transpose(1, 2).to(torch.promote_types(q.dtype, torch.float32)),
                scale,
            )
            return o.transpose(1, 2).to(q.dtype)
        if self.group > 1:  # key head h // G for query head h
            keys, w, beta, v = (x.repeat_interleave(self.group, 1) for x in (keys, w, beta, v))
        if gate is not None and self.gate_scale == "sqrt_dim":  # fla: (s + F_i - F_j) * scale
            gate = gate * scale
        cdt = k.dtype
        o = path_attention(q.to(cdt) * scale, keys, v.to(cdt), (w, beta), gate, self.window(layer), self.block)
        return o.to(q.dtype)

    def fla(self, device, tq: int, tk: int, layer: int):
        """fla's kernel where ``kernel`` allows it and it applies (CUDA with fla-core, a whole
        sequence, no window, head dim 16, 32 or 64), else None; ``kernel: fla`` without CUDA and
        fla-core raises ``Unavailable``."""
        if self.kernel == "torch":
            return None
        fn = fla_kernel(device)
        if fn is None and self.kernel == "fla":
            raise Unavailable(f"{self.name}: kernel fla unavailable: {FLA_MISSING}")
        whole = tq == tk and not windowed(tk, self.window(layer)) and self.cfg.head_dim in FLA_HEAD_DIMS
        return fn if whole else None

    def forget_sums(self, log_f):
        """F (B, H, Tk) = cumsum of log f, log f_0 left out (it cancels), from the cache's
        (B, Hkv, Tk, G) channels: query head h = key head h // G, column h % G."""
        b, hkv, t, g = log_f.shape
        log_f = log_f.permute(0, 1, 3, 2).reshape(b, hkv * g, t)
        return torch.cat([torch.zeros_like(log_f[..., :1]), log_f[..., 1:]], -1).cumsum(-1)

    def attn_backend(self, device, dtype) -> str:
        torch_path = f"PyTorch chunked UT transform: {self.block}-position chunks, float32 scores"
        if self.kernel == "torch":
            return torch_path
        if fla_kernel(device) is None:
            return f"{torch_path} (fla's path_attn kernel unavailable: {FLA_MISSING})"
        return f"fla parallel_path_attention (Triton) for whole sequences; decode rows and windows: {torch_path}"


@register
class PaTHAttention(PaTH):
    name = "path"


@register
class PaTHFoX(PaTH):
    name = "path_fox"
    forget = True
