"""Rotary position embeddings (Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary
Position Embedding").

Each pair of channels (i, i + hd/2) of q and k is rotated by the angle p * theta_i with
theta_i = 10000^(-2i/hd), so q_m . k_n depends on m - n only. Values are not rotated. cos/sin for
integer positions come from a table that grows on demand; float positions (interpolation, as in
Chen et al. 2023 "Position Interpolation") are computed directly.
"""
import torch
from torch.autograd.function import once_differentiable

from posbench.method import PositionCache, PositionMethod, causal_attention
from posbench.registry import register


@register
class Rotary(PositionMethod):
    name = "rotary"

    def __init__(self, cfg, base: float = 10000.0):
        super().__init__(cfg)
        hd = cfg.head_dim
        if hd % 2:
            raise ValueError(f"rotary needs an even head_dim, got {hd}")
        inv_freq = base ** (-torch.arange(0, hd, 2, dtype=torch.float32) / hd)  # (hd/2,)
        self.register_position_buffer("inv_freq", inv_freq)
        self._table: dict[str, torch.Tensor] = {}  # device -> (N, hd/2) angles, grown by doubling
        self._cache = PositionCache()

    def _angles(self, pos: torch.Tensor) -> torch.Tensor:
        """(T, hd/2) float32 angles for positions (T,)."""
        if pos.is_floating_point() or pos.numel() == 0:
            return pos.to(torch.float32)[:, None] * self.inv_freq[None, :]
        key = str(pos.device)
        table = self._table.get(key)
        # Reading pos.max() synchronises a GPU, but this runs only on a PositionCache miss: once
        # per new positions tensor, not once per layer or per step.
        need = int(pos.max()) + 1
        if table is None or table.shape[0] < need:
            size = max(need, 2048, 0 if table is None else 2 * table.shape[0])
            table = torch.arange(size, device=pos.device, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
            self._table[key] = table
        return table[pos]

    def _cos_sin(self, pos: torch.Tensor, dtype):
        def build():
            ang = self._angles(pos)
            return ang.cos().to(dtype), ang.sin().to(dtype)

        return self._cache.get((pos,), build, extra=(dtype,))

    @staticmethod
    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x (B, H, T, hd); cos, sin (T, hd/2). Rotates channel pairs (i, i + hd/2)."""
        return _RotateQK.apply(x, None, cos, sin)[0]

    def attend(self, q, k, v, q_pos, k_pos, layer):
        cos_k, sin_k = self._cos_sin(k_pos, q.dtype)
        # q_pos is the tail of k_pos, so its cos/sin are the tail of the keys'.
        q, k = _RotateQK.apply(q, k, cos_k, sin_k)
        return causal_attention(q, k, v)


def _rotated(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, sign: float) -> torch.Tensor:
    """A new contiguous tensor: x rotated by +angle (sign 1) or -angle (sign -1) per channel pair
    (i, i + hd/2): (x1 cos - sign x2 sin, x2 cos + sign x1 sin). Each half is written in place,
    two kernels per half and no concatenation."""
    t = x.shape[-2]
    if t != cos.shape[-2]:  # queries when Tq < Tk: the tail of the key positions
        cos, sin = cos[cos.shape[-2] - t :], sin[sin.shape[-2] - t :]
    half = x.shape[-1] // 2
    x1, x2 = x.split(half, dim=-1)
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
