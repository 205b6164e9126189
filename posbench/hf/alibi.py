"""ALiBi of BLOOM and MPT checkpoints at posbench's positions (0..T-1, or j * L_train / L_valid
interpolated), each model's own slopes, the bias in float32 or rounded to the model dtype as BLOOM
does (how transformers builds each: docs/hf-checkpoints.md)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from posbench.core.outcome import Unavailable

BIAS_DTYPES = ("float32", "compute")


def model_slopes(model, model_type: str) -> torch.Tensor:
    """(H,) float32 slopes the checkpoint's own code uses."""
    if model_type == "bloom":
        from transformers.models.bloom.modeling_bloom import _get_alibi_slopes

        return _get_alibi_slopes(model.config.n_head, torch.device("cpu"))
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    cfg = model.config
    two = build_mpt_alibi_tensor(cfg.n_heads, 2, cfg.attn_config.alibi_bias_max)  # (H, 1, 2): [-m, 0]
    return -two[:, 0, 0].float()


class AlibiRecipe:
    """ALiBi of a BLOOM or MPT model at given positions and bias dtype (posbench's ``alibi``)."""

    def __init__(self, model, model_type: str, method: str, options: dict, position_scale: float = 1.0):
        if method != "alibi":
            raise Unavailable(
                f"{method} cannot be applied to an ALiBi checkpoint ({model_type}); allowed: alibi "
                "(options bias_dtype: float32 | compute; interpolate: true for interpolation)"
            )
        unknown = sorted(set(options) - {"bias_dtype"})
        bias_dtype = options.get("bias_dtype", "float32")
        if unknown or bias_dtype not in BIAS_DTYPES:
            raise ValueError(f"alibi on an hf checkpoint: options {options!r}; allowed: bias_dtype {' | '.join(BIAS_DTYPES)}")
        self.model, self.model_type, self.bias_dtype = model, model_type, bias_dtype
        # positions p * position_scale where the caller gives none (the extension task's fixed interpolation)
        self.position_scale = position_scale
        self.slopes = model_slopes(model, model_type).to(model.device)  # (H,)
        self.pos: torch.Tensor | None = None  # (T,) float32 positions of the window being run
        self.last_bias: torch.Tensor | None = None  # the bias of the last forward, for tests and checks
        self.refresh()

    def refresh(self) -> None:
        """Install the bias hooks for the model's current dtype (again after it changed)."""
        body = self.model.transformer
        if self.model_type == "bloom":
            body.build_alibi_tensor = self._bloom_bias  # called when an attention mask is given
            if self.bias_dtype == "float32" and self.model.dtype != torch.float32:
                for block in body.h:
                    attn = block.self_attention
                    attn.forward = _float32_bias_attention(attn)
        else:
            body.build_mpt_alibi_tensor = self._mpt_bias

    def _dtype(self) -> torch.dtype:
        return torch.float32 if self.bias_dtype == "float32" else self.model.dtype

    def _bloom_bias(self, attention_mask, num_heads, dtype) -> torch.Tensor:
        """(B*H, 1, T) m_h * p_j, as BLOOM's ``build_alibi_tensor`` at positions p."""
        B = attention_mask.shape[0]
        bias = (self.slopes[:, None, None] * self.pos[None, None, :]).to(self._dtype())  # (H, 1, T)
        self.last_bias = bias
        return bias.repeat(B, 1, 1)

    def _mpt_bias(self, num_heads, sequence_length, alibi_bias_max=8, device=None) -> torch.Tensor:
        """(H, 1, T) m_h * (p_j - p_last), as MPT's ``build_mpt_alibi_tensor`` for this window."""
        bias = (self.slopes[:, None, None] * (self.pos - self.pos[-1])[None, None, :]).to(self._dtype())
        self.last_bias = bias
        return bias

    def forward(self, idx: torch.Tensor, pos: torch.Tensor | None) -> torch.Tensor:
        """logits (B, T, V) of idx (B, T) at positions ``pos`` (T,), default (0..T-1) * position_scale."""
        B, T = idx.shape
        plain = torch.arange(T, device=idx.device, dtype=torch.float32) * self.position_scale
        self.pos = (plain if pos is None else pos.to(idx.device)).to(torch.float32)
        # BLOOM reads the bias hook only when handed a mask; all ones: no padding
        mask = torch.ones(B, T, dtype=torch.long, device=idx.device) if self.model_type == "bloom" else None
        return self.model(input_ids=idx, attention_mask=mask, use_cache=False).logits


def _float32_bias_attention(attn):
    """BLOOM's attention with q.k / sqrt(d) (model dtype) and the float32 bias summed in float32."""
    from transformers.models.bloom.modeling_bloom import dropout_add

    def forward(
        hidden_states, residual, alibi, attention_mask, layer_past=None, use_cache=False, output_attentions=False, **kwargs
    ):
        B, T, _ = hidden_states.shape
        q, k, v = attn._reshape(attn.query_key_value(hidden_states))  # (B, H, T, hd) each
        scores = torch.matmul(q, k.transpose(-1, -2)) * attn.inv_norm_factor  # (B, H, T, T)
        scores = scores.float() + attn.beta * alibi.view(B, attn.num_heads, 1, -1)
        if attention_mask is not None:
            scores = scores + attention_mask
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        context = torch.matmul(attn.attention_dropout(probs), v)  # (B, H, T, hd)
        context = context.transpose(1, 2).reshape(B, T, attn.num_heads * attn.head_dim)
        return dropout_add(attn.dense(context), residual, attn.hidden_dropout, attn.training), probs

    return forward
