"""Pretrained Hugging Face causal LMs from a local folder (``--model hf:DIR``, the ``posbench[hf]``
extra): loading offline (checkpoint), posbench's position recipes applied to them (rope for the
Llama family, alibi for BLOOM and MPT), the call the evaluation windows make (lm), text through the
checkpoint's own tokenizer (text) and a text passkey probe (passkey). Guide: docs/hf-checkpoints.md.
"""
