"""FoX (Lin, Nikishin, He, Courville 2025, "Forgetting Transformer", ICLR) with attention fused into
one Triton kernel: the forget-gate bias is never stored as an L x L tensor.

Same mathematics, parameters and KV cache as ``fox`` (same state_dict keys, ``gate_w`` and
``gate_b``, so checkpoints move between the two): f_t = sigmoid(w_h . k_t + b_h) per layer, head
and token, F = cumsum(log f) in float32, and the score of query i and key j gets F_i - F_j. F_i is
the same for every key of row i and cancels in the softmax, so the kernel
(``posbench.triton_kernels.alibi_attention`` with ``key_bias``, FlashAttention-style tiling after Dao et
al. 2022) adds -F_j, one float32 per key and head read with each key tile, and its backward
returns d(-F_j) = sum_i dScore_ij, through which the gates get their gradients. Positions are not
read, so interpolation changes nothing. Design and limits: docs/kernels.md.
"""

from __future__ import annotations

from posbench.core import registry
from posbench.core.method import PositionMethod
from posbench.core.registry import register
from posbench.triton_kernels import FusedKernelMethod

Fox = registry.get("fox")


@register
class FoxTriton(Fox, FusedKernelMethod):
    """fox's hooks; FusedKernelMethod's ``unavailable`` (CUDA and triton, or CPU tensors under
    TRITON_INTERPRET=1 without bfloat16), and a fused-kernel method wherever the harness asks."""

    name = "fox_triton"
    # Under GQA the model expands the shared heads for this method: fox's unpacking picks each query
    # head's own gate from the G its key head carries, which needs the H expanded heads.
    grouped_kv = False
    no_window = "the fused kernel masks by causality alone (posbench/triton_kernels/alibi_attention.py)"
    prepare = PositionMethod.prepare  # no state: positions are not read (no pos_scale, no host sync)

    def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
        k, big_f = self.keys_and_gates(k, q.shape[-1], layer)  # raw keys, F (B, H, Tk)
        from posbench.triton_kernels.alibi_attention import alibi_attention

        return alibi_attention(q, k, v, None, key_bias=(-big_f).float())  # (B, H, Tq, hd)

    def attn_backend(self, device, dtype) -> str:
        return "triton fused, forget-gate key bias in kernel (float32)"
