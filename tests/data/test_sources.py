"""posbench.data.sources.check_source: a corpus said aloud before anything runs (issue 66)."""

from __future__ import annotations

import pytest

from posbench.data.sources import check_source
from posbench.data.token_cache import DataError


def wikitext_2(tmp_path, splits=("valid", "test")):
    folder = tmp_path / "wikitext-2"
    folder.mkdir()
    for split in splits:
        (folder / f"{split}.txt").write_text("a b c\n")
    return folder


def test_a_folder_without_a_train_split_is_said_in_one_line(tmp_path):
    # WikiText-2 as shipped: the training protocol trains on test.txt; no longer silently
    folder = wikitext_2(tmp_path)
    note = check_source("wikitext", path=tmp_path)
    assert note.startswith(f"wikitext: {folder} has no training split, so the models train on its test split")
    assert "python bench.py download wikitext-103" in note and "\n" not in note
    (folder / "test.txt").unlink()  # nothing to train on at all: refused
    with pytest.raises(DataError, match=r"split 'train' has no file in .*wikitext-2 \(looked for wiki.test.tokens or test.txt\)"):
        check_source("wikitext", path=tmp_path)


def test_training_on_the_test_split_asked_for_is_said(tmp_path):
    folder = wikitext_2(tmp_path)
    note = check_source("wikitext-2", path=tmp_path, splits={"train": "test", "valid": "valid"})
    assert note == f"wikitext-2: training on the test split of {folder} (splits train: test), not on a training split"
    assert check_source("wikitext-2", path=tmp_path / "wikitext-2", splits={"train": "valid"}) is not None


def test_a_whole_folder_is_quiet(tmp_path):
    wikitext_2(tmp_path, ("train", "valid", "test"))
    assert check_source("wikitext", path=tmp_path) is None
    assert check_source("synthetic") is None


def test_no_folder_names_the_download(monkeypatch):
    monkeypatch.delenv("POSBENCH_DATA_DIR", raising=False)
    with pytest.raises(DataError, match=r"python bench.py download wikitext-103"):
        check_source("wikitext-103")
