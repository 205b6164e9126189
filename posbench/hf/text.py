"""Evaluation tokens for a checkpoint: a text corpus (``text``, WikiText) read as text and encoded
with the checkpoint's own tokenizer; a corpus of token ids (the synthetic kinds) checked against
its vocabulary."""

from __future__ import annotations

import numpy as np

from posbench.data.sources import WIKITEXT_FILES, data_dir, source_file, text_files, wikitext_folder
from posbench.data.token_cache import DataError

TEXT_KINDS = ("text", "wikitext", "wikitext-103", "wikitext-2")
VALID_FRACTION = 0.1  # a text corpus without splits: its last tenth is valid (as load_corpus)
CHUNK_CHARS = 1 << 20  # characters encoded at a time when only a split's first tokens are kept


def split_text(kind: str, path=None, splits: dict | None = None, split: str = "valid") -> tuple[str, str]:
    """(the ``split`` (valid or train) split's text, where it came from) of a text or WikiText
    corpus; a text corpus without splits is one stream the caller cuts."""
    if kind.startswith("wikitext"):
        folder = wikitext_folder(data_dir(path, kind), kind)
        file_split = (splits or {}).get(split, split)
        # WikiText-2 as shipped has no training file: its test split trains, as posbench's own
        # models do (``open_corpus``); the row's source names the file
        choices = [file_split] + (["test"] if split == "train" and not (splits or {}).get(split) else [])
        for chosen in choices:
            for name in WIKITEXT_FILES.get(chosen, (f"{chosen}.txt",)):
                if source_file(folder / name):
                    return (folder / name).read_text(encoding="utf-8", errors="replace"), str(folder / name)
        raise DataError(f"{kind}: no {' or '.join(choices)} split in {folder}")
    files = text_files(path, splits)
    chosen = files.get(split) or files.get("all")
    if chosen is None:
        raise DataError(f"text: splits {sorted(files)} name no {split!r} split; allowed: splits with {split}")
    return "".join(f.read_text(encoding="utf-8", errors="replace") for f in chosen), ", ".join(map(str, chosen))


def encode(tokenizer, text: str) -> np.ndarray:
    """(N,) int64 ids of ``text`` through the checkpoint's tokenizer, no special tokens added."""
    if tokenizer is None:
        raise DataError(
            "the checkpoint has no tokenizer (tokenizer.json or its files beside config.json); a text "
            "corpus needs one; allowed: save the tokenizer with save_pretrained into the folder"
        )
    return np.asarray(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=np.int64)


def encode_prefix(tokenizer, text: str, max_tokens: int) -> np.ndarray:
    """The first ``max_tokens`` ids of ``text``, encoded a piece (ending at a line break) at a time
    until there are enough: a fine-tune's share of WikiText-103's train split, not all of it."""
    pieces, count, start = [], 0, 0
    while start < len(text) and count < max_tokens:
        end = text.find("\n", start + CHUNK_CHARS)
        end = len(text) if end < 0 else end + 1
        pieces.append(encode(tokenizer, text[start:end]))
        count, start = count + len(pieces[-1]), end
    return np.concatenate(pieces)[:max_tokens] if pieces else np.zeros(0, dtype=np.int64)


def text_tokens(
    tokenizer, kind: str, path=None, splits=None, max_tokens: int | None = None, split: str = "valid"
) -> tuple[np.ndarray, dict]:
    """(``split``'s ids, a description for the row) of a text corpus through the tokenizer."""
    text, source = split_text(kind, path, splits, split)
    one_stream = kind == "text" and not (splits or {}).get(split)
    if split == "train" and max_tokens is not None and not one_stream:
        ids = encode_prefix(tokenizer, text, max_tokens)
    else:
        ids = encode(tokenizer, text)
    if one_stream:  # one stream: the last tenth valid, the rest train
        cut = len(ids) - int(len(ids) * VALID_FRACTION)
        ids = ids[cut:] if split == "valid" else ids[:cut]
    if max_tokens is not None:
        ids = ids[:max_tokens]
    return ids, {"kind": kind, "source": source, "tokenizer": type(tokenizer).__name__, f"{split}_tokens": len(ids)}


def check_ids(ids, vocab_size: int, corpus: str) -> None:
    """One line when a corpus of token ids does not fit the checkpoint's vocabulary."""
    top = int(np.max(ids)) if len(ids) else -1
    if top >= vocab_size:
        raise DataError(
            f"corpus {corpus}: token ids up to {top} do not fit the checkpoint's vocabulary of "
            f"{vocab_size}; allowed: a text corpus (--data DIR, or corpus: {{kind: text | wikitext}}), "
            "encoded with the checkpoint's tokenizer"
        )
