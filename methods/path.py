"""PaTH: position encoding by accumulated Householder transforms (Yang, Shen, Wen, Tan, Mishra,
Ren, Panda, Kim 2025, "PaTH Attention: Position Encoding via Accumulating Householder
Transformations", NeurIPS; arXiv 2505.16381), and PaTH-FoX, PaTH with FoX's forget gates.

Every token t defines a transform H_t = I - beta_t w_t w_t^T (w_t a unit vector, beta_t in (0, 2),
so H_t is a reflection at beta 2 and a projection at beta 1). A key reaches a later query through
the transforms of the tokens between them, instead of a rotation by their distance:

    score_ij = q_i^T H_i H_{i-1} ... H_{j+1} k_j / sqrt(hd)     (j <= i; j = i: q_i . k_i)

and attention is the softmax of the scores. PaTH computes w_t and beta_t from the layer input; the
method interface hands a layer q, k and v, so they read the token's raw key of the same key head
(a linear map of the normed input, as fox's gate does): w_t = normalize(W_{l,h} k_t),
beta_t = 2 sigmoid(u_{l,h} . k_t + b_{l,h}) (W starts at the identity, u at 0.02-scale noise, b at
``beta_bias``, default 0). Transforms are per key head; a query head reads its key head's (GQA).

``path_fox`` adds FoX's forget gate (methods/fox.py) per query head from the raw keys of every key
head: score_ij += F_i - F_j, F = cumsum(log f), log f_t = logsigmoid(g_h . k_t + c_h).

The reference is exact and plain PyTorch, O(L^2 hd) time: a scan over the key positions t from
the last to the first keeps every query i >= t carried back to t (H_{t+1} ... H_i q_i), reads column
t of the scores, then applies H_t to them; the scores (B, H, Tq, Tk) are float32. That scan takes
Tk Python steps and keeps O(L^2 hd) for the gradient, so a whole sequence (Tq == Tk) goes by
blocks of ``block`` (64) positions instead (``path_scores_blocked``: the same numbers, O(block +
L / block) steps, O(L^2 / block) per head kept); a decode step takes the scan. The KV cache
holds each key with its w_t and beta_t (and log f_t for path_fox) as extra channels, so a decode
step finds the transforms of the tokens between. flash-linear-attention's Triton kernel
(``fla.ops.path_attn``, the ``fla-core`` package) is not wired: posbench runs the reference
on every device, and says so in ``attn_backend``.
"""

import torch
import torch.nn.functional as F
from torch import nn

from posbench.core.masked import mask_bias
from posbench.core.method import PositionMethod
from posbench.core.registry import register


def path_scores(q, k, w, beta) -> torch.Tensor:
    """(B, H, Tq, Tk) q_i^T H_i ... H_{j+1} k_j, unmasked where j > i, for q (B, H, Tq, d), k and w
    (B, H, Tk, d), beta (B, H, Tk); float32 or float64 in, the same out. Query i sits at key index
    i + Tk - Tq."""
    tq, tk = q.shape[-2], k.shape[-2]
    at = torch.arange(tq, device=q.device) + tk - tq  # (Tq,) each query's key index
    carried = q  # carried[i] = H_{t+1} ... H_i q_i: query i carried back to position t
    cols = []
    for t in range(tk - 1, -1, -1):
        cols.append((carried * k[..., t, None, :]).sum(-1))  # (B, H, Tq): column t
        wt = w[..., t, None, :]  # (B, H, 1, d)
        moved = carried - beta[..., t, None, None] * (carried * wt).sum(-1, keepdim=True) * wt  # H_t q
        carried = torch.where((at >= t)[:, None], moved, carried)  # H_t acts on the queries at or after t
    return torch.stack(cols[::-1], -1)


def _apply(x, w, beta):
    """H x = x - beta (w . x) w on the last axis: x (..., m, d), w (..., d), beta (...)."""
    return x - (beta[..., None, None] * (x * w[..., None, :]).sum(-1, keepdim=True)) * w[..., None, :]


def path_scores_blocked(q, k, w, beta, block: int = 64) -> torch.Tensor:
    """``path_scores`` for Tq == Tk = L, by blocks of ``block`` positions: O(block + L / block)
    Python steps instead of O(L), and memory O(L^2 / block) per head for the gradient.

    Within a block a scan as ``path_scores``'s (all blocks at once) gives the scores of its own
    keys and each query carried back to the block's start, q^_i = H_s ... H_i q_i; a second scan
    carries each key to its block's end, k^_j = H_e ... H_{j+1} k_j; a third builds each block's
    transform G_b = H_e ... H_s (hd x hd). A key of block b then reaches block a > b as
    G_{a-1} ... G_{b+1} k^_j: one batched matmul per block distance."""
    with torch.autocast(q.device.type, enabled=False):  # matmuls in q's dtype, as the scan's products
        return _blocked(q, k, w, beta, block)


def _blocked(q, k, w, beta, block):
    b_, h, L, d = q.shape
    n = -(-L // block)
    pad = n * block - L  # padded positions come last, with beta 0 (H = I): no real pair sees them
    if pad:
        q, k, w = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, w))
        beta = F.pad(beta, (0, pad))
    q, k, w = (x.view(b_, h, n, block, d) for x in (q, k, w))
    beta = beta.view(b_, h, n, block)
    at = torch.arange(block, device=q.device)
    carried, cols = q, []  # queries of each block, carried back to offset t
    for t in range(block - 1, -1, -1):
        cols.append((carried * k[..., t, None, :]).sum(-1))  # (B, H, n, C): key t of the block
        carried = torch.where((at >= t)[:, None], _apply(carried, w[..., t, :], beta[..., t]), carried)
    intra = torch.stack(cols[::-1], -1)  # (B, H, n, C, C): query i, key t of the same block
    q_hat, k_hat = carried, k
    for t in range(1, block):  # each key j < t of the block through H_t
        k_hat = torch.where((at < t)[:, None], _apply(k_hat, w[..., t, :], beta[..., t]), k_hat)
    scores = q.new_zeros(b_, h, n, n, block, block)  # (B, H, query block, key block, i, j)
    blocks = torch.arange(n, device=q.device)
    scores[:, :, blocks, blocks] = intra
    if n > 1:
        g = torch.eye(d, dtype=q.dtype, device=q.device).expand(b_, h, n, d, d)
        for t in range(block):  # G_b = H_e ... H_s, as a matrix
            g = _apply(g.transpose(-1, -2), w[..., t, :], beta[..., t]).transpose(-1, -2)
        keys = k_hat  # keys of block b carried to the start of block b + 1
        for gap in range(1, n):
            a = blocks[gap:]
            scores[:, :, a, a - gap] = q_hat[:, :, gap:] @ keys[:, :, : n - gap].transpose(-1, -2)
            if gap + 1 < n:  # on through block b + gap
                keys = keys[:, :, : n - gap - 1] @ g[:, :, gap : n - 1].transpose(-1, -2)
    scores = scores.permute(0, 1, 2, 4, 3, 5).reshape(b_, h, n * block, n * block)
    return scores[..., :L, :L]


class PaTH(PositionMethod):
    """PaTH, with FoX's forget gates when ``forget`` (the rows ``path`` and ``path_fox``)."""

    forget = False

    def __init__(self, cfg, beta_bias: float = 0.0, block: int = 64):
        super().__init__(cfg)
        if not isinstance(beta_bias, (int, float)) or isinstance(beta_bias, bool):
            raise ValueError(f"{self.name}: beta_bias must be a number, got {beta_bias!r}")
        if not (isinstance(block, int) and not isinstance(block, bool) and block >= 1):
            raise ValueError(f"{self.name}: block must be a positive integer (positions per block), got {block!r}")
        self.block = block
        hd, hkv = cfg.head_dim, cfg.kv_heads
        eye = torch.eye(hd).expand(cfg.n_layers, hkv, hd, hd)
        self.w_proj = nn.Parameter(eye + torch.randn(cfg.n_layers, hkv, hd, hd) * 0.02)  # (L, Hkv, hd, hd)
        self.beta_u = nn.Parameter(torch.randn(cfg.n_layers, hkv, hd) * 0.02)
        self.beta_b = nn.Parameter(torch.full((cfg.n_layers, hkv), float(beta_bias)))
        self.group = cfg.n_heads // hkv
        if self.forget:
            self.gate_w = nn.Parameter(torch.randn(cfg.n_layers, cfg.n_heads, hkv * hd) * 0.02)
            self.gate_b = nn.Parameter(torch.zeros(cfg.n_layers, cfg.n_heads))
        self.extra = hd + 1 + (self.group if self.forget else 0)  # key channels beyond hd in the cache

    def transforms(self, k, layer):
        """w (B, Hkv, T, hd) and beta (B, Hkv, T), float32 (float64 for float64 keys), from raw keys
        (B, Hkv, T, hd)."""
        cdt = torch.float64 if k.dtype == torch.float64 else torch.float32
        kf = k.to(cdt)
        w = F.normalize(torch.einsum("bhtd,hed->bhte", kf, self.w_proj[layer].to(cdt)), dim=-1)
        beta = 2 * torch.sigmoid((kf * self.beta_u[layer].to(cdt)[:, None]).sum(-1) + self.beta_b[layer].to(cdt)[:, None])
        return w, beta

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
        if k.shape[-1] == hd:  # raw keys: a call outside a model forward
            heads = k.shape[1]
            if heads != self.cfg.kv_heads:  # expanded to the query heads: one copy per key head
                k = k[:, :: self.group]
            k = self.encoded(k, layer)
            if heads != k.shape[1]:
                k = k.repeat_interleave(self.group, 1)
        cdt = k.dtype
        keys, w, beta = k[..., :hd], k[..., hd : 2 * hd], k[..., 2 * hd]
        if k.shape[1] != q.shape[1]:  # a grouped caller: key head h // G for query head h
            keys, w, beta = (x.repeat_interleave(self.group, 1) for x in (keys, w, beta))
        qs = q.to(cdt) * hd**-0.5
        if qs.shape[-2] == keys.shape[-2]:  # a whole sequence: by blocks
            scores = path_scores_blocked(qs, keys, w, beta, self.block)  # (B, H, L, L)
        else:  # a chunk after cached keys (decoding): the plain scan, O(Tk) steps
            scores = path_scores(qs, keys, w, beta)  # (B, H, Tq, Tk)
        if self.forget:
            big_f = self.forget_sums(k[..., 2 * hd + 1 :])  # (B, H, Tk)
            tq, tk = q.shape[-2], k.shape[-2]
            scores = scores + big_f[..., tk - tq :, None] - big_f[..., None, :]
        probs = mask_bias(scores, self.window(layer)).softmax(-1)
        return (probs @ v.to(cdt)).to(q.dtype)

    def forget_sums(self, log_f):
        """F (B, H, Tk) = cumsum of log f, log f_0 left out (it cancels), from the cache's
        (B, H, Tk, G) channels, query head h reading column h % G."""
        b, h, t, g = log_f.shape
        own = (torch.arange(h, device=log_f.device) % g).view(1, h, 1, 1).expand(b, h, t, 1)
        log_f = log_f.gather(-1, own)[..., 0]
        return torch.cat([torch.zeros_like(log_f[..., :1]), log_f[..., 1:]], -1).cumsum(-1)

    def attn_backend(self, device, dtype) -> str:
        return f"PyTorch reference: {self.block}-position blocks, float32 scores (fla's path_attn Triton kernel not wired)"


@register
class PaTHAttention(PaTH):
    name = "path"


@register
class PaTHFoX(PaTH):
    name = "path_fox"
    forget = True
