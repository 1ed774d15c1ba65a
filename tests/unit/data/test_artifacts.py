"""The data stages' records read back: each lists the train corpora alike, checked against the lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.data import artifacts
from pipeline.data.artifacts import Corpus
from pipeline.errors import UserError

# The same two corpora as download, clean and binarize record them.
RECORDS = {
    artifacts.MANIFEST: {"splits": {"train": [{"name": "news", "lines": 3}, {"name": "web", "lines": 2}]}},
    artifacts.CLEAN_STATS: {
        "train": {"lines_out": 5, "sources": {"news": {"lines_out": 3}, "web": {"lines_out": 2}}}
    },
    artifacts.BIN_META: {"sources": [{"name": "news", "sentences": 3}, {"name": "web", "sentences": 2}]},
}


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_each_record_lists_the_train_corpora_in_order(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_text(json.dumps(RECORDS[name]), encoding="utf-8")
    listed = artifacts.train_corpora(tmp_path / name, 5, tmp_path / "train.src", "clean")
    assert listed == [Corpus("news", 3), Corpus("web", 2)]
    with pytest.raises(
        UserError, match=rf"{name} counts 5 training lines but .*train.src has 6; run the clean"
    ):
        artifacts.train_corpora(tmp_path / name, 6, tmp_path / "train.src", "clean")


def test_without_a_record_the_split_is_one_corpus(tmp_path: Path) -> None:
    assert artifacts.listed_corpora(tmp_path / artifacts.CLEAN_STATS) == []
    listed = artifacts.train_corpora(tmp_path / artifacts.CLEAN_STATS, 7, tmp_path / "train.src", "clean")
    assert listed == [Corpus(artifacts.WHOLE, 7)]
    assert listed[0].to_dict() == {"name": "train", "sentences": 7}  # as meta.json lists it


@pytest.mark.parametrize("text", ["{not json", "[1, 2]"])
@pytest.mark.parametrize(
    "name, stage",
    [(artifacts.MANIFEST, "download"), (artifacts.CLEAN_STATS, "clean"), (artifacts.BIN_META, "binarize")],
)
def test_a_broken_record_names_itself_and_the_stage_to_rerun(tmp_path: Path, text: str, name, stage) -> None:
    (tmp_path / name).write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match=rf"{name}: .*rerun the {stage} stage \(dvc repro -f {stage}\)"):
        artifacts.listed_corpora(tmp_path / name)


def test_a_broken_record_of_no_known_stage_says_to_rerun_its_writer(tmp_path: Path) -> None:
    (tmp_path / "other.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(UserError, match=r"other.json: not JSON .*run the stage that writes it again"):
        artifacts.read_record(tmp_path / "other.json")
