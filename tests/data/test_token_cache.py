"""A damaged token cache is rebuilt (or refused in one line), and a source that is not a regular
file is refused instead of being taken for a missing split (issue 26: data loss)."""

import json
import os

import numpy as np
import pytest

from posbench.data import token_cache
from posbench.data.corpus import DataError, load_corpus

WORDS = "the cat sat on the mat and the dog ran to the cat\n" * 40


@pytest.fixture
def wiki(tmp_path, monkeypatch):
    """A WikiText-format folder and a private cache."""
    monkeypatch.setenv("POSBENCH_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "wiki"
    folder.mkdir()
    for split in ("train", "valid", "test"):
        (folder / f"wiki.{split}.tokens").write_text(WORDS)
    return folder


def _train(corpus) -> np.ndarray:
    return np.array(corpus.split("train"))


def test_truncated_split_is_rebuilt_not_trained_on(wiki, capsys):
    first = load_corpus("wikitext", path=wiki)
    whole = _train(first)
    bin_path = first.folder / "train.bin"
    with open(bin_path, "r+b") as f:  # a crash or a full disk left the file short
        f.truncate(bin_path.stat().st_size // 3)
    again = load_corpus("wikitext", path=wiki)
    assert np.array_equal(_train(again), whole)  # the whole split, not the third that was left
    err = capsys.readouterr().err
    assert "rebuilding" in err and str(first.folder) in err and "train.bin" in err


@pytest.mark.parametrize("dtype", ["object", "float64", "<U8", 7])
def test_meta_dtype_outside_the_allowlist_is_never_mapped(wiki, dtype, capsys):
    first = load_corpus("wikitext", path=wiki)
    whole = _train(first)
    meta_path = first.folder / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["splits"]["train"]["dtype"] = dtype
    meta_path.write_text(json.dumps(meta))
    again = load_corpus("wikitext", path=wiki)
    assert again.meta["splits"]["train"]["dtype"] in token_cache.DTYPES
    assert np.array_equal(_train(again), whole)
    assert "dtype" in capsys.readouterr().err


@pytest.mark.parametrize("spoil", ["garbage", "missing_bin", "no_splits", "negative"])
def test_other_damage_is_found(wiki, spoil):
    folder = load_corpus("wikitext", path=wiki).folder
    meta_path = folder / "meta.json"
    meta = json.loads(meta_path.read_text())
    if spoil == "garbage":
        meta_path.write_bytes(b"\xff{not json")
    elif spoil == "missing_bin":
        (folder / "train.bin").unlink()
    elif spoil == "no_splits":
        meta_path.write_text(json.dumps({"vocab_size": 3}))
    else:
        meta["splits"]["valid"]["n_tokens"] = -4
        meta_path.write_text(json.dumps(meta))
    assert token_cache.damage(folder) is not None
    load_corpus("wikitext", path=wiki)
    assert token_cache.damage(folder) is None  # rebuilt whole


def test_a_whole_cache_is_reused_untouched(wiki):
    folder = load_corpus("wikitext", path=wiki).folder
    assert token_cache.damage(folder) is None
    stamp = (folder / "train.bin").stat().st_mtime_ns
    load_corpus("wikitext", path=wiki)
    assert (folder / "train.bin").stat().st_mtime_ns == stamp


def test_damaged_cache_that_cannot_be_moved_is_refused_in_one_line(wiki, monkeypatch):
    folder = load_corpus("wikitext", path=wiki).folder
    (folder / "train.bin").write_bytes(b"\x00")

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(token_cache.os, "rename", refuse)
    with pytest.raises(DataError) as err:
        load_corpus("wikitext", path=wiki)
    message = str(err.value)
    assert str(folder) in message and "train.bin" in message and "\n" not in message


def test_fifo_train_split_is_refused_not_replaced_by_test(wiki):
    (wiki / "wiki.train.tokens").unlink()
    os.mkfifo(wiki / "wiki.train.tokens")
    with pytest.raises(DataError, match="not a regular file .a FIFO."):
        load_corpus("wikitext", path=wiki)


def test_link_to_a_device_is_refused(wiki):
    (wiki / "wiki.train.tokens").unlink()
    os.symlink("/dev/zero", wiki / "wiki.train.tokens")
    with pytest.raises(DataError, match="character device"):
        load_corpus("wikitext", path=wiki)


def test_dangling_link_is_refused(wiki):
    (wiki / "wiki.train.tokens").unlink()
    os.symlink(wiki / "gone", wiki / "wiki.train.tokens")
    with pytest.raises(DataError, match="link to nothing"):
        load_corpus("wikitext", path=wiki)


def test_link_to_a_regular_file_is_read(wiki):
    real = wiki / "real.tokens"
    os.replace(wiki / "wiki.train.tokens", real)
    os.symlink(real, wiki / "wiki.train.tokens")
    assert len(load_corpus("wikitext", path=wiki).split("train")) > 0


def test_text_kind_refuses_a_fifo(tmp_path, monkeypatch):
    monkeypatch.setenv("POSBENCH_CACHE_DIR", str(tmp_path / "cache"))
    os.mkfifo(tmp_path / "pipe.txt")
    with pytest.raises(DataError, match="FIFO"):
        load_corpus("text", path=tmp_path / "pipe.txt", level="byte")
