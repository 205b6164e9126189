"""Issue 56 friction: ``--model hf:DIR --data`` a WikiText-2 folder without a training file
fine-tunes on its test split, as posbench's own models train (docs/data.md), instead of one
``no train split`` error per case."""

import pytest

from posbench.data.token_cache import DataError
from posbench.hf.text import split_text


def test_a_wikitext2_folder_without_train_fine_tunes_on_test(tmp_path):
    (tmp_path / "valid.txt").write_text("valid words\n")
    (tmp_path / "test.txt").write_text("test words\n")
    text, source = split_text("wikitext-2", tmp_path, None, "train")
    assert text == "test words\n" and source == str(tmp_path / "test.txt")
    assert split_text("wikitext-2", tmp_path, None, "valid")[0] == "valid words\n"
    (tmp_path / "test.txt").unlink()
    with pytest.raises(DataError, match="no train or test split"):
        split_text("wikitext-2", tmp_path, None, "train")
