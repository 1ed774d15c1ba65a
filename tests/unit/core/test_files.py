"""Atomic outputs: a failed write leaves the previous output whole and no temporaries."""

from pathlib import Path

import pytest

from pipeline import files
from pipeline.errors import ParamsError, UserError


def test_a_failed_file_write_keeps_the_previous_file(tmp_path):
    path = tmp_path / "out.txt"
    files.write_text(path, "old\n")
    with pytest.raises(RuntimeError):
        with files.atomic_path(path) as tmp:
            tmp.write_text("half of the new", encoding="utf-8")
            raise RuntimeError("killed mid-write")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_a_directory_is_replaced_whole(tmp_path):
    out = tmp_path / "stage"
    with files.atomic_path(out) as tmp:
        tmp.mkdir()
        (tmp / "a").write_text("1")
        (tmp / "stale").write_text("x")
    with files.atomic_path(out) as tmp:
        tmp.mkdir()
        (tmp / "a").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == ["a"] and (out / "a").read_text() == "2"
    assert [p.name for p in tmp_path.iterdir()] == ["stage"]


def test_lines_round_trip_and_split_on_lf_only(tmp_path):
    path = tmp_path / "lines"
    files.write_lines(path, ["a\rb", "", "c"])
    assert files.read_lines(path) == ["a\rb", "", "c"]
    files.write_lines(path, [])
    assert files.read_lines(path) == []


def test_a_paired_writer_keeps_the_two_sides_line_aligned(tmp_path):
    with files.PairedWriter(tmp_path / "train") as out:
        out.write_lines("src", ["ein Haus", "zwei\rCR"])  # a stray CR stays inside its line
        out.write_lines("tgt", ["a house", "two\rCR"])
        out.write_lines("src", [])  # nothing: no empty line
        out.write_pair(b"drei\n", b"three\n")
    assert files.read_lines(tmp_path / "train.src") == ["ein Haus", "zwei\rCR", "drei"]
    assert files.read_lines(tmp_path / "train.tgt") == ["a house", "two\rCR", "three"]
    assert out.paths == {"src": tmp_path / "train.src", "tgt": tmp_path / "train.tgt"}


def test_batched_gives_every_item_once_in_order_the_last_batch_shorter():
    assert list(files.batched(iter(range(7)), 3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(files.batched([], 3)) == []


def test_read_yaml_names_the_file_and_the_fix(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("a: [1, 2]\n", encoding="utf-8")
    assert files.read_yaml(good, "make it") == {"a": [1, 2]}
    with pytest.raises(UserError, match=r"missing\.yaml: no such file; make it$"):
        files.read_yaml(tmp_path / "missing.yaml", "make it")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n", encoding="utf-8")
    with pytest.raises(ParamsError, match=r"bad\.yaml: not valid YAML \("):
        files.read_yaml(bad, "make it", ParamsError)
