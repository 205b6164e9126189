import pytest

from posbench.core.files import WriteError, atomic_write_text


def test_atomic_write_replaces_whole_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "sub" / "env.json"
    atomic_write_text(target, "first")
    atomic_write_text(target, "second")
    assert target.read_text() == "second"
    assert sorted(p.name for p in target.parent.iterdir()) == ["env.json"]


def test_parent_that_is_a_file_is_one_line_error(tmp_path):
    (tmp_path / "plain").write_text("")
    with pytest.raises(WriteError, match=r"cannot write .*plain/x\.json: ") as info:
        atomic_write_text(tmp_path / "plain" / "x.json", "{}")
    assert "\n" not in str(info.value)


def test_unwritable_target_keeps_old_content(tmp_path):
    target = tmp_path / "t.json"
    target.write_text("old")
    (tmp_path / "t.json.dir").mkdir()
    with pytest.raises(WriteError, match="cannot write"):
        atomic_write_text(tmp_path / "t.json.dir", "new")  # a folder cannot be replaced by a file
    assert target.read_text() == "old"
