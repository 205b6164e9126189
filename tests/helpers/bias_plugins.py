"""Plugin bias methods that write only ``bias`` (the dense plan) or declare a bias cheap enough to
build per block (the tiles plan): the paths no built-in method takes."""

import torch
from torch import nn

from posbench.attention.bias import BiasForm, BiasMethod


class Wave(BiasMethod):
    """A plugin with a bias that is not a function of the distance: only ``bias``."""

    name = "wave_bias"

    def __init__(self, cfg):
        super().__init__(cfg)
        self.amp = nn.Parameter(torch.linspace(0.2, 0.8, cfg.n_heads))  # (H,)

    def bias(self, q_pos, k_pos, dtype):
        qp, kp = q_pos.float()[:, None], k_pos.float()[None, :]
        return self.amp.float()[:, None, None] * torch.sin(0.3 * qp - 0.1 * kp)  # (H, Tq, Tk)


class WaveTiles(Wave):
    """The same plugin, cheap enough to have its bias built block by block (the tiles plan)."""

    name = "wave_tiles_bias"

    def bias_form(self, dtype):
        return BiasForm(per_block=True)


PLUGINS = {c.name: c for c in (Wave, WaveTiles)}
