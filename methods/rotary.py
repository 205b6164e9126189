"""Rotary position embeddings (Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary
Position Embedding").

Each pair of channels (i, i + hd/2) of q and k is rotated by the angle p * theta_i with
theta_i = 10000^(-2i/hd), so q_m . k_n depends on m - n only. Values are not rotated. cos/sin for
integer positions come from a table that grows on demand; float positions (interpolation, as in
Chen et al. 2023 "Position Interpolation") are computed directly.
"""
import torch

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
        self.register_buffer("inv_freq", inv_freq, persistent=False)
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
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)

    def attend(self, q, k, v, q_pos, k_pos, layer):
        cos_k, sin_k = self._cos_sin(k_pos, q.dtype)
        tq = q.shape[-2]
        # q_pos is the tail of k_pos, so its cos/sin are the tail of the keys'.
        q = self.rotate(q, cos_k[-tq:], sin_k[-tq:])
        k = self.rotate(k, cos_k, sin_k)
        return causal_attention(q, k, v)
