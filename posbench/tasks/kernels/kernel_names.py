"""The kernel variants the task times (its own methods, not position methods). Torch-free, so the
task's declaration and a suite's validation import no torch; timed_points.py implements each name."""

VARIANTS = (
    "alibi_triton",
    "t5_triton",
    "triton_no_bias",
    "sdpa_float_bias",
    "sdpa_t5_bias",
    "sdpa_causal",
    "flex_no_bias",
    "flex_alibi",
    "flex_t5",
    "flash_alibi",
)
TRITON_VARIANTS = ("alibi_triton", "t5_triton", "triton_no_bias")  # the fused kernels: they need triton
