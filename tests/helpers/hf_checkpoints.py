"""Tiny random-weight Hugging Face checkpoints (Llama, BLOOM, MPT) with a tokenizer trained
offline on a few sentences, saved with save_pretrained: what the hf tests evaluate. Nothing is
downloaded."""

from __future__ import annotations

from pathlib import Path

import pytest

SENTENCES = [
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.",
    "The pass key is 71432. Remember it. 71432 is the pass key. What is the pass key? The pass key is",
    "0 1 2 3 4 5 6 7 8 9 10 42 365 2048 31415 a quick brown fox jumps over the lazy dog",
]
VOCAB = 300
L_TRAIN = 16  # the length the tests tell posbench the tiny checkpoints were trained at
NEEDS_HF = "needs transformers and tokenizers: pip install posbench[hf]"


def tiny_tokenizer():
    """A byte-level BPE of VOCAB tokens trained on SENTENCES, as a PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=["<unk>", "<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(SENTENCES * 3, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def tiny_model(family: str, vocab: int, max_len: int = 32, seed: int = 0, **extra):
    """A random-weight causal LM of ``family`` (llama | bloom | mpt), 2 layers, 4 heads, width 32."""
    import torch
    from transformers import BloomConfig, BloomForCausalLM, LlamaConfig, LlamaForCausalLM, MptConfig, MptForCausalLM

    torch.manual_seed(seed)
    if family == "llama":
        cfg = LlamaConfig(
            vocab_size=vocab,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=max_len,
            **extra,
        )
        return LlamaForCausalLM(cfg)
    if family == "bloom":
        return BloomForCausalLM(BloomConfig(vocab_size=vocab, hidden_size=32, n_layer=2, n_head=4, **extra))
    cfg = MptConfig(vocab_size=vocab, d_model=32, n_layers=2, n_heads=4, max_seq_len=max_len, expansion_ratio=2, **extra)
    return MptForCausalLM(cfg)


def save_checkpoint(folder: Path, family: str, max_len: int = 32, **extra) -> Path:
    """``folder`` holding a tiny ``family`` model and the tiny tokenizer (save_pretrained)."""
    tokenizer = tiny_tokenizer()
    model = tiny_model(family, len(tokenizer), max_len, **extra)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    """family -> folder of a tiny random-weight checkpoint and its tokenizer (save_pretrained)."""
    pytest.importorskip("transformers", reason=NEEDS_HF)
    root = tmp_path_factory.mktemp("hf")
    return {family: save_checkpoint(root / family, family) for family in ("llama", "bloom", "mpt")}
