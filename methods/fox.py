"""FoX: the Forgetting Transformer (Lin, Nikishin, He, Courville 2025, "Forgetting Transformer:
Softmax Attention with a Forget Gate", ICLR).

No position embeddings; a forget gate per head and token, f_t = sigmoid(w_h . x_t + b_h), and every
layer adds to the score of query i and key j (unscaled by 1/sqrt(d), like ALiBi)

    bias_ij = sum_{l=j+1..i} log f_l = F_i - F_j,    F = cumsum(log f) in float32.

The gate reads the layer's input. The method interface hands a layer only q, k and v, so the gate
reads this layer's raw key vector of every key head, k_t (Hkv x hd values): k_t = W_k LN(x_t) + b_k
is a linear map of the normed layer input, so w_h . k_t + b_h is the paper's w'_h . LN(x_t) + b'_h
with w'_h = W_k^T w_h (the same family of gates wherever W_k is invertible) at the paper's cost, a
Dkv -> H projection per token. One (w, b) per layer and head, as in the paper.

F_i cancels in the softmax of row i, so attention needs only -F_j, one number per key and head:
on a CPU in float32 or float64 (Tq == Tk) that vector is the CPU flash op's mask, with a blocked
backward that gives it its gradient (``posbench.core.key_bias``; compiled, an extra key column
through SDPA, ``posbench.attention.linear.head_column_sdpa``), with no L x L bias; otherwise
the masked (B, H, Tq, Tk) float32 bias F_i - F_j; on CUDA, F_i - F_j read inside FlexAttention
(``fox_triton``: -F_j inside the fused Triton kernel). The bias depends on the input, so nothing is
cached across forwards. The KV cache carries each cached key's log f_j (``encode_qk`` appends it
to the key: one extra column in float32, two 16-bit halves, hi + lo, in bfloat16 or float16, so one
float per cached key and query head either way; under grouped-query attention a key head carries
the gates of its G = H / Hkv query heads), and attend takes F = cumsum over every key. F_0 is
left out (log f_0 := 0): it cancels, and a bias that never reads a later token keeps causality exact.
Positions are not read at all, so interpolated positions change nothing.
"""

import torch
import torch.nn.functional as F
from torch import nn

from posbench.attention import flex
from posbench.attention.linear import LINEAR_SPAN, head_column_sdpa
from posbench.core.cpu_flash import flash_here
from posbench.core.key_bias import key_bias_attention
from posbench.core.masked import windowed
from posbench.core.method import PositionMethod, causal_attention
from posbench.core.registry import register

WIDE = (torch.float32, torch.float64)  # dtypes whose key column holds log f exactly


def pack_log_gate(k: torch.Tensor, log_f: torch.Tensor) -> torch.Tensor:
    """k (B, Hkv, T, hd) and log f (B, Hkv, T) or (B, Hkv, T, G) float32, G query heads per key head
    -> (B, Hkv, T, hd + G) in float32/float64, or (B, Hkv, T, hd + 2G) in a 16-bit dtype: log f as
    hi + lo, so its value survives to ~2^-17."""
    if log_f.dim() == 3:
        log_f = log_f[..., None]
    if k.dtype in WIDE:
        return torch.cat([k, log_f.to(k.dtype)], -1)
    hi = log_f.to(k.dtype)
    lo = (log_f - hi.float()).to(k.dtype)
    return torch.cat([k, hi, lo], -1)


def unpack_log_gate(k: torch.Tensor, hd: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse of ``pack_log_gate`` on keys expanded to the H query heads (key head h // G
    copied to query head h): (k (B, H, T, hd), log f (B, H, T) float32 or float64), head h reading
    its own gate, column h % G of the G its key head carries."""
    extra = k[..., hd:]
    if k.dtype in WIDE:
        log_f = extra
    else:
        g = extra.shape[-1] // 2
        log_f = extra[..., :g].float() + extra[..., g:].float()
    b, h, t, g = log_f.shape
    if g == 1:
        log_f = log_f[..., 0]
    else:
        own = (torch.arange(h, device=k.device) % g).view(1, h, 1, 1).expand(b, h, t, 1)
        log_f = log_f.gather(-1, own)[..., 0]
    return k[..., :hd], log_f.to(torch.float64 if k.dtype == torch.float64 else torch.float32)


def fox_reference(q, k, v, log_f) -> torch.Tensor:
    """Plain PyTorch: softmax_j(q_i . k_j / sqrt(hd) + F_i - F_j) v_j over j <= i (bottom-right
    aligned), F = cumsum(log f) over the keys; q (B, H, Tq, hd), k, v (B, H, Tk, hd), log f (B, H, Tk)."""
    tq, tk = q.shape[-2], k.shape[-2]
    big_f = log_f.double().cumsum(-1)  # (B, H, Tk)
    scores = q.double() @ k.double().transpose(-1, -2) / q.shape[-1] ** 0.5
    scores = scores + big_f[..., tk - tq :, None] - big_f[..., None, :]
    i = torch.arange(tq)[:, None] + tk - tq
    scores = scores.masked_fill(torch.arange(tk)[None, :] > i, float("-inf"))
    return (scores.softmax(-1) @ v.double()).to(q.dtype)


def _key_column(q, k, v, big_f):
    """Attention with -F_j (B, H, Tk), one number per key (Tq = Tk, no window): eager on a CPU, the
    flash op at the model's head dim with -F as its mask and a blocked backward in GEMMs
    (``posbench.core.key_bias``); compiled or without that op, one extra key column through
    SDPA (head dim hd + 1, which cost SDPA's CPU kernel 1.2x its time at hd)."""
    if flash_here(q.device) and not torch.compiler.is_compiling():
        return key_bias_attention(q, k, v, -big_f)
    return head_column_sdpa(q, k, v, (-big_f).to(q.dtype))


def _gate_bias(q, k, v, big_f, window=None):
    """Attention with the masked bias F_i - F_j (B, H, Tq, Tk) float32."""
    tq, tk = q.shape[-2], k.shape[-2]
    bias = big_f[..., tk - tq :, None] - big_f[..., None, :]  # unmasked
    return causal_attention(q, k, v, bias, window=window)


def _either_path(fits, q, k, v, big_f):
    """torch.cond: the key column where ``fits`` (a bool tensor), else the bias. Its operands must
    not alias (q and v are views of one projection), and both branches must give their output and
    gradients in one layout."""

    def branch(attend):
        return lambda *a: _by_rows(attend(*map(_DenseGrad.apply, a)))

    return torch.cond(fits, branch(_key_column), branch(_gate_bias), (q.clone(), k.clone(), v.clone(), big_f))


class _DenseGrad(torch.autograd.Function):
    """A copy whose gradient is contiguous (the key column's come in SDPA's layout, the bias
    path's in its matmuls')."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g.contiguous()


def _by_rows(o):
    """o (B, H, T, hd) stored as (B, T, H, hd), the layout the layer reads."""
    return o.transpose(1, 2).contiguous().transpose(1, 2)


@register
class ForgettingTransformer(PositionMethod):
    name = "fox"
    softmax_shift = True  # the key-column path drops F_i

    def __init__(self, cfg, gate_bias: float = 0.0):
        super().__init__(cfg)
        if not isinstance(gate_bias, (int, float)):
            raise ValueError(f"fox: gate_bias must be a number, got {gate_bias!r}")
        # (L, H, Dkv): each layer's gate per query head reads every key head's raw key (Dkv = Hkv x hd);
        # b (L, H) starts at gate_bias (sigmoid(0) = 0.5 per step: a strong decay at start; larger
        # b, slower forgetting). Under grouped-query attention a key head carries the G = H / Hkv
        # gates of the query heads that read it: one float per cached key and query head.
        self.group = cfg.n_heads // cfg.kv_heads
        self.gate_w = nn.Parameter(torch.randn(cfg.n_layers, cfg.n_heads, cfg.kv_heads * cfg.head_dim) * 0.02)
        self.gate_b = nn.Parameter(torch.full((cfg.n_layers, cfg.n_heads), float(gate_bias)))

    def log_gate(self, k: torch.Tensor, layer: int) -> torch.Tensor:
        """log f (B, H, T) in float32 (float64 for float64 keys) from raw keys k (B, Hkv, T, hd), or
        the same keys expanded to the H query heads (each key head's G copies are equal)."""
        cdt = torch.float64 if k.dtype == torch.float64 else torch.float32
        if self.group > 1 and k.shape[1] == self.cfg.n_heads:
            k = k[:, :: self.group]  # expanded keys: one copy per key head
        b, h, t, hd = k.shape
        flat = k.to(cdt).transpose(1, 2).reshape(b, t, h * hd)  # (B, T, Dkv): every key head's key
        logits = flat @ self.gate_w[layer].to(cdt).t() + self.gate_b[layer].to(cdt)  # (B, T, H)
        return F.logsigmoid(logits).transpose(1, 2)

    def encode_qk(self, q, k, layer, state=None):
        """The new keys with their log f appended: what the KV cache holds."""
        log_f = self.log_gate(k, layer)  # (B, H, T)
        b, hkv, t, _ = k.shape
        # query head h = key head h // G, column h % G: (B, H, T) -> (B, Hkv, T, G)
        return q, pack_log_gate(k, log_f.view(b, hkv, self.group, t).transpose(2, 3))

    def keys_and_gates(self, k, hd: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(raw keys (B, H, Tk, hd), F (B, H, Tk) float32) from keys as the cache holds them, or
        from raw keys (a call outside a model forward: the gates computed from them)."""
        if k.shape[-1] == hd:
            log_f = self.log_gate(k, layer)
        else:
            k, log_f = unpack_log_gate(k, hd)
        # F_j = sum_{l=1..j} log f_l: log f_0 cancels; leaving it out keeps key 0's bias at 0.
        return k, torch.cat([torch.zeros_like(log_f[..., :1]), log_f[..., 1:]], -1).cumsum(-1)

    def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
        k, big_f = self.keys_and_gates(k, q.shape[-1], layer)  # big_f (B, H, Tk)
        tq, tk = q.shape[-2], k.shape[-2]
        window = self.window(layer) if windowed(tk, self.window(layer)) else None
        if q.device.type == "cpu" and q.dtype in WIDE and tq == tk and window is None:
            # softmax_j(s_ij + F_i - F_j) = softmax_j(s_ij - F_j): one column per key, no L x L.
            # |F_j| <= LINEAR_SPAN keeps each score's rounding at ALiBi's linear plan's bound.
            fits = -big_f[..., -1].detach().min() <= LINEAR_SPAN
            if torch.compiler.is_compiling():
                # A graph cannot branch on a value: both paths are traced, and it picks one as it runs.
                return _either_path(fits, q, k, v, big_f)
            if fits:
                return _key_column(q, k, v, big_f)
        if tq >= flex.FLEX_MIN_ROWS and flex.flex_available(q.device):
            # CUDA: F_i - F_j read inside FlexAttention's fused kernel (docs/attention-plans.md)
            mod = flex.gate_score_mod(big_f.float(), tq)
            return flex.flex_attend(q, k, v, mod, flex.causal_block_mask(tq, tk, str(q.device), window))
        return _gate_bias(q, k, v, big_f, window)

    def attn_backend(self, device, dtype) -> str:
        if flash_here(device) and dtype in WIDE:
            return "cpu flash op + forget-gate key mask, blocked GEMM backward (no L x L)"
        if torch.device(device).type == "cpu" and dtype in WIDE:
            return "sdpa causal + forget-gate key column (no L x L)"
        if flex.flex_available(device):
            return "flex_attention, forget-gate score_mod (no L x L)"
        if dtype not in WIDE:
            return "explicit float32 (B*H*L*L scores, data-dependent bias)"
        return f"sdpa + {str(dtype).removeprefix('torch.')} (B, H, L, L) data-dependent bias"
