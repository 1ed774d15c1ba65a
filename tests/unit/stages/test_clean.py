"""Tests of the clean stage: the training filters in their order, untouched eval splits, the stats."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import re
import unicodedata
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from pipeline import files, params
from pipeline.data import cleaning, lines
from pipeline.errors import UserError
from pipeline.stages import clean
from tests.support.corpora import clean_split
from tests.support.repo import REPO

BASE = params.load(REPO / "params.yaml")
CLEAN = dataclasses.replace(BASE.clean, max_words=5, max_ratio=3.0, dedupe=True, decontaminate=True)
EVAL = {"val": (["v"], ["v"]), "test/t": (["t"], ["t"])}
NO_DROPS = dict.fromkeys(cleaning.DROP_REASONS, 0)


def write_raw(raw: Path, splits: dict[str, tuple[list[str], list[str]]]) -> Path:
    for split, (src, tgt) in splits.items():
        (raw / split).parent.mkdir(parents=True, exist_ok=True)
        files.write_lines(raw / f"{split}.src", src)
        files.write_lines(raw / f"{split}.tgt", tgt)
    return raw


# --- one split through the stage -------------------------------------------------------------------


def test_each_drop_reason_is_counted_by_the_first_rule_that_applies(tmp_path):
    pairs = [
        ("ein Hund", "a dog"),  # kept
        ("", "a dog"),  # empty
        ("\u200b ", "x"),  # empty once normalized
        ("ein sehr sehr sehr langer Satz", "a long one"),  # too_long: 6 words > 5
        ("", "one two three four five six"),  # empty comes before too_long
        ("ja", "yes indeed"),  # ratio: 10 / 2 > 3
        ("a", "abcd"),  # ratio: 4 / 1
        ("ab", "abcdef"),  # ratio exactly 3: kept
        ("ein  Hund", "a dog"),  # duplicate once normalized
        ("ein Hund", "the dog"),  # not a duplicate: tgt differs
    ]
    src, tgt = zip(*pairs)
    out_src, out_tgt, stats = clean_split(tmp_path, list(src), list(tgt), CLEAN, train=True)
    assert list(zip(out_src, out_tgt)) == [("ein Hund", "a dog"), ("ab", "abcdef"), ("ein Hund", "the dog")]
    assert stats["dropped"] == {**NO_DROPS, "empty": 3, "too_long": 1, "ratio": 2, "duplicate": 1}
    assert (stats["lines_in"], stats["lines_out"]) == (10, 3)


def test_dedupe_keeps_the_first_and_can_be_turned_off(tmp_path):
    src = ["b", "a", "a", "b", "a"]
    tgt = ["B", "A", "A", "B", "other"]
    loose = dataclasses.replace(CLEAN, max_ratio=10.0)
    out_src, out_tgt, stats = clean_split(tmp_path, src, tgt, loose, train=True)
    assert list(zip(out_src, out_tgt)) == [("b", "B"), ("a", "A"), ("a", "other")]
    assert stats["dropped"]["duplicate"] == 2
    kept, _, stats = clean_split(tmp_path, src, tgt, dataclasses.replace(loose, dedupe=False), train=True)
    assert kept == src and stats["dropped"]["duplicate"] == 0


def test_a_pair_dropped_for_another_reason_is_not_remembered_as_seen(tmp_path):
    pairs = [("a", "abcdefgh"), ("a", "abcdefgh"), ("a", "abc")]
    src, _, stats = clean_split(tmp_path, *map(list, zip(*pairs)), CLEAN, train=True)
    assert src == ["a"] and stats["dropped"] == {**NO_DROPS, "ratio": 2}


def test_eval_splits_are_normalized_but_never_filtered(tmp_path):
    src = ["  x\ty ", "", "a", "a", "one two three four five six seven"]
    tgt = ["X", "", "abcdefghij", "abcdefghij", "1"]
    out_src, out_tgt, stats = clean_split(tmp_path, src, tgt, CLEAN, train=False)
    assert out_src == ["x y", "", "a", "a", "one two three four five six seven"]
    assert out_tgt == tgt
    assert stats["lines_out"] == 5 and sum(stats["dropped"].values()) == 0
    assert stats["normalized"]["src"] == {"control_chars": 1, "nfc": 0, "whitespace": 1}


def test_a_one_megabyte_line_is_dropped_from_train_and_kept_in_test(tmp_path):
    huge = "wort " * 200_000  # 1 MB, 200,000 words
    raw = write_raw(
        tmp_path / "raw",
        {
            "train": (["kurz", huge], ["short", "long"]),
            "val": (["v"], ["v"]),
            "test/t": ([huge, "klein"], ["long", "small"]),
        },
    )
    stats = clean.clean(CLEAN, raw, tmp_path / "clean")
    assert stats["train"]["dropped"]["too_long"] == 1
    assert files.read_lines(tmp_path / "clean" / "train.src") == ["kurz"]
    test_src = files.read_lines(tmp_path / "clean" / "test" / "t.src")
    assert len(test_src) == 2 and test_src[0] == huge.strip()


# --- the stage -------------------------------------------------------------------


def test_clean_writes_every_split_and_its_stats(tmp_path):
    raw = write_raw(
        tmp_path / "raw",
        {
            "train": (["Ein  Hund", "", "Ein Hund", "Zwei Katzen"], ["A dog", "x", "A dog", "Two cats"]),
            "val": (["", "Cafe\u0301"], ["", "caf\u00e9"]),
            "test/one": (["a\tb", "", "c"], ["A", "B", ""]),
            "test/two": (["d"], ["D"]),
        },
    )
    out = tmp_path / "clean"
    stats = clean.clean(CLEAN, raw, out)

    assert files.read_lines(out / "train.src") == ["Ein Hund", "Zwei Katzen"]
    assert files.read_lines(out / "train.tgt") == ["A dog", "Two cats"]
    assert files.read_lines(out / "val.src") == ["", "Café"]  # the empty line stays
    assert files.read_lines(out / "test" / "one.src") == ["a b", "", "c"]
    assert files.read_lines(out / "test" / "one.tgt") == ["A", "B", ""]
    assert files.read_lines(out / "test" / "two.tgt") == ["D"]

    assert json.loads((out / "stats.json").read_text(encoding="utf-8")) == stats
    assert stats["train"] == {
        "lines_in": 4,
        "lines_out": 2,
        "dropped": {**NO_DROPS, "empty": 1, "duplicate": 1},
        "normalized": {
            "src": {"control_chars": 0, "nfc": 0, "whitespace": 1},
            "tgt": {"control_chars": 0, "nfc": 0, "whitespace": 0},
        },
        # no manifest.json in raw: the split is one source
        "sources": {
            "train": {"lines_in": 4, "lines_out": 2, "dropped": {**NO_DROPS, "empty": 1, "duplicate": 1}}
        },
    }
    assert stats["val"]["lines_in"] == stats["val"]["lines_out"] == 2
    assert stats["val"]["normalized"]["src"]["nfc"] == 1
    assert sorted(stats["test"]) == ["one", "two"]
    assert (
        stats["test"]["one"]["lines_out"] == 3
        and stats["test"]["one"]["normalized"]["src"]["control_chars"] == 1
    )
    assert stats["unicode_version"] == unicodedata.unidata_version
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clean", "raw"]  # no temporaries left


def test_nothing_left_of_train_is_an_error_and_writes_nothing(tmp_path):
    raw = write_raw(tmp_path / "raw", {"train": (["", "a"], ["x", "abcdefgh"]), **EVAL})
    counts = r"\(empty 1, ratio 1\)"
    with pytest.raises(UserError, match=rf"dropped all 2 training pairs {counts}"):
        clean.clean(CLEAN, raw, tmp_path / "clean")
    assert not (tmp_path / "clean").exists()


def test_missing_or_misaligned_raw_files_are_user_errors(tmp_path):
    raw = write_raw(tmp_path / "raw", {"train": (["a"], ["b"]), "val": (["v"], ["v"])})
    with pytest.raises(UserError, match=r"test/: no test set .*run the download stage"):
        clean.clean(CLEAN, raw, tmp_path / "clean")
    write_raw(raw, {"test/x": (["a", "b"], ["c"])})
    with pytest.raises(UserError, match=r"test/x.src has 2 lines but .*test/x.tgt has 1"):
        clean.clean(CLEAN, raw, tmp_path / "clean")
    assert not (tmp_path / "clean").exists()


def test_command(tmp_path):
    raw = write_raw(tmp_path / "raw", {"train": (["a b", "a b"], ["c d", "c d"]), **EVAL})
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(dataclasses.replace(BASE, clean=CLEAN).to_dict()), encoding="utf-8")
    args = ["--params", str(params_file), "--raw", str(raw), "--out", str(tmp_path / "clean")]
    result = CliRunner().invoke(clean.command, args)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"wrote {tmp_path / 'clean'}: train 1 of 2 pairs kept"

    args = ["--params", str(params_file), "--raw", str(tmp_path / "none"), "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(clean.command, args)
    assert result.exit_code == 1
    missing = tmp_path / "none" / "train.src"
    assert result.stderr.strip() == f"Error: {missing}: no such file; run the download stage first"


# --- decontamination and per-source counts ------------------------------------------


def manifest(raw: Path, sources: dict[str, int]) -> None:
    """The download manifest's train sources (names and line counts), all clean reads of it."""
    train = [{"name": name, "lines": n} for name, n in sources.items()]
    files.write_json(raw / "manifest.json", {"splits": {"train": train}})


def test_training_pairs_repeating_a_val_or_test_side_are_dropped_and_counted_per_source(tmp_path):
    raw = write_raw(
        tmp_path / "raw",
        {
            "train": (
                ["Ein Hund", "zwei  Katzen", "drei", "vier", "fünf", "Hallo"],
                ["A dog", "two cats", "three", "Four birds", "five", "Hi"],
            ),
            "val": (["Hallo"], ["Hello"]),  # src of the last pair
            "test/a": (["zwei Katzen"], ["2 cats"]),  # src once normalized
            "test/b": (["x"], ["Four  birds"]),  # tgt once normalized
        },
    )
    manifest(raw, {"news": 2, "web": 4})
    stats = clean.clean(CLEAN, raw, tmp_path / "clean")
    assert files.read_lines(tmp_path / "clean" / "train.src") == ["Ein Hund", "drei", "fünf"]
    assert files.read_lines(tmp_path / "clean" / "train.tgt") == ["A dog", "three", "five"]
    assert stats["train"]["dropped"]["heldout_overlap"] == 3
    assert stats["train"]["sources"] == {
        "news": {"lines_in": 2, "lines_out": 1, "dropped": {**NO_DROPS, "heldout_overlap": 1}},
        "web": {"lines_in": 4, "lines_out": 2, "dropped": {**NO_DROPS, "heldout_overlap": 2}},
    }
    off = dataclasses.replace(CLEAN, decontaminate=False)
    stats = clean.clean(off, raw, tmp_path / "clean2")
    assert len(files.read_lines(tmp_path / "clean2" / "train.src")) == 6
    assert stats["train"]["dropped"]["heldout_overlap"] == 0


@pytest.mark.parametrize("workers", [1, 2])
def test_a_duplicate_is_counted_to_the_source_that_repeats_it_and_the_first_stays(
    tmp_path, monkeypatch, workers
):
    src = ["a", "b", "a", "c", "b", "d", "c  ", "e"]
    tgt = ["A", "B", "A", "C", "B", "D", "C", "E"]
    raw = write_raw(tmp_path / "raw", {"train": (src, tgt), **EVAL})
    manifest(raw, {"news": 3, "web": 5})  # news repeats "a"; web repeats "b" (of news) and "c"
    monkeypatch.setattr(clean, "CHUNK_PAIRS", 2)  # duplicates a chunk or more apart
    stats = clean.clean(CLEAN, raw, tmp_path / "clean", workers=workers)
    assert files.read_lines(tmp_path / "clean" / "train.src") == ["a", "b", "c", "d", "e"]
    assert files.read_lines(tmp_path / "clean" / "train.tgt") == ["A", "B", "C", "D", "E"]
    assert stats["train"]["sources"] == {
        "news": {"lines_in": 3, "lines_out": 2, "dropped": {**NO_DROPS, "duplicate": 1}},
        "web": {"lines_in": 5, "lines_out": 3, "dropped": {**NO_DROPS, "duplicate": 2}},
    }
    assert (stats["train"]["lines_out"], stats["train"]["dropped"]["duplicate"]) == (5, 3)
    assert sorted(p.name for p in (tmp_path / "clean").iterdir()) == [
        "stats.json",
        "test",
        "train.src",
        "train.tgt",
        "val.src",
        "val.tgt",
    ]  # no scratch file is left in the output


def test_an_empty_line_of_a_test_set_does_not_drop_training_pairs(tmp_path):
    raw = write_raw(
        tmp_path / "raw", {"train": (["a", "b"], ["A", "B"]), "val": ([""], [""]), "test/t": (["c"], [""])}
    )
    stats = clean.clean(CLEAN, raw, tmp_path / "clean")
    assert stats["train"]["lines_out"] == 2


def test_a_manifest_that_disagrees_with_the_train_file_is_a_user_error(tmp_path):
    raw = write_raw(tmp_path / "raw", {"train": (["a", "b"], ["A", "B"]), **EVAL})
    manifest(raw, {"news": 3})
    with pytest.raises(UserError, match=r"manifest.json counts 3 training lines but .*train.src has 2"):
        clean.clean(CLEAN, raw, tmp_path / "clean")


# --- streaming, workers, hashes ---------------------------------------------------------


def corpus(n: int) -> tuple[list[str], list[str]]:
    """n pairs with duplicates near and far, drops of every kind, and text to normalize."""
    src = [f"Satz  {i % 37}" if i % 5 else f"wort{i % 11}" for i in range(n)]
    tgt = [f"sentence {i % 37}" if i % 7 else "" for i in range(n)]
    src[3], tgt[3] = "v", "x"  # a val line: heldout_overlap
    return src, tgt


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_the_output_is_the_same_for_any_number_of_workers_and_chunk_size(tmp_path, monkeypatch, workers):
    raw = write_raw(tmp_path / "raw", {"train": corpus(200), **EVAL})
    manifest(raw, {"a": 120, "b": 80})
    whole = clean.clean(CLEAN, raw, tmp_path / "whole")  # one chunk, this process
    monkeypatch.setattr(clean, "CHUNK_PAIRS", 7)
    monkeypatch.setattr(lines, "READ_BYTES", 16)  # lines cut across the parent's read blocks
    assert clean.clean(CLEAN, raw, tmp_path / "chunked", workers=workers) == whole
    for path in sorted((tmp_path / "whole").rglob("*.*")):
        assert path.read_bytes() == (tmp_path / "chunked" / path.relative_to(tmp_path / "whole")).read_bytes()
    assert whole["train"]["dropped"]["duplicate"] > 0 and whole["train"]["dropped"]["heldout_overlap"] == 1


def test_a_failing_worker_fails_the_stage_with_its_error_and_the_old_output_stays(tmp_path, monkeypatch):
    src, tgt = corpus(50)
    raw = write_raw(tmp_path / "raw", {"train": (src, tgt), **EVAL})
    out = tmp_path / "clean"
    clean.clean(CLEAN, raw, out)
    before = {p: p.read_bytes() for p in out.rglob("*.*")}
    with open(raw / "train.src", "ab") as f:
        f.write(b"bad \xff\n")
    with open(raw / "train.tgt", "ab") as f:
        f.write(b"bad\n")
    monkeypatch.setattr(clean, "CHUNK_PAIRS", 4)
    with pytest.raises(
        UserError, match=r"train.src: not UTF-8 \(invalid start byte\); run the download stage"
    ):
        clean.clean(CLEAN, raw, out, workers=2)
    assert {p: p.read_bytes() for p in out.rglob("*.*")} == before
    assert not multiprocessing.active_children()


def test_ctrl_c_stops_the_workers_and_keeps_the_old_output(tmp_path, monkeypatch):
    raw = write_raw(tmp_path / "raw", {"train": corpus(60), **EVAL})
    out = tmp_path / "clean"
    clean.clean(CLEAN, raw, out)
    before = {p: p.read_bytes() for p in out.rglob("*.*")}
    taken = cleaning.TrainFilter.take

    def interrupted(self, chunk):
        if self.done >= 12:
            raise KeyboardInterrupt
        return taken(self, chunk)

    monkeypatch.setattr(clean, "CHUNK_PAIRS", 4)
    monkeypatch.setattr(cleaning.TrainFilter, "take", interrupted)
    with pytest.raises(KeyboardInterrupt):
        clean.clean(dataclasses.replace(CLEAN, max_ratio=10.0), raw, out, workers=2)
    assert {p: p.read_bytes() for p in out.rglob("*.*")} == before
    assert not multiprocessing.active_children()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clean", "raw"]


# --- sources that ship Moses-tokenized ----------------------------------------------------


def test_only_the_lines_of_a_tokenized_source_are_detokenized_and_counted(tmp_path, monkeypatch):
    monkeypatch.setattr(clean, "CHUNK_PAIRS", 2)  # the tokenized source spans chunks and starts in one
    plain = [("Er sagt , nein .", "He says , no .")]  # a plain source keeps its spaces as they are
    moses = [("Sie sagt &quot; ja &quot; .", "She says &quot; yes &quot; ."), ("Es geht .", "It 's fine .")]
    moses += [("Gut", "Good")]  # nothing to undo: not counted as changed
    raw = write_raw(
        tmp_path / "raw",
        {
            "train": ([s for s, _ in plain + moses], [t for _, t in plain + moses]),
            "val": (["Ein Test ."], ["A test ."]),
            "test/t": (["Ein Test , zwei ."], ["A test , two ."]),
        },
    )
    files.write_json(
        raw / "manifest.json",
        {
            "src_lang": "de",
            "tgt_lang": "en",
            "splits": {
                "train": [{"name": "plain", "lines": 1}, {"name": "mlqe", "lines": 3, "tokenized": "moses"}],
                "val": [{"name": "v", "lines": 1}],
                "test": [{"name": "t", "lines": 1, "tokenized": "moses"}],
            },
        },
    )
    stats = clean.clean(CLEAN, raw, tmp_path / "clean")
    out = tmp_path / "clean"
    assert files.read_lines(out / "train.src") == ["Er sagt , nein .", 'Sie sagt "ja".', "Es geht.", "Gut"]
    assert files.read_lines(out / "train.tgt") == ["He says , no .", 'She says "yes".', "It's fine.", "Good"]
    assert files.read_lines(out / "val.tgt") == ["A test ."]
    assert files.read_lines(out / "test/t.tgt") == ["A test, two."]
    assert stats["train"]["detokenized"] == {"src": 2, "tgt": 2}
    assert stats["test"]["t"]["detokenized"] == {"src": 1, "tgt": 1}
    assert "detokenized" not in stats["val"]  # no tokenized source: stats.json as before


def test_a_held_out_split_detokenizes_the_lines_it_took_from_a_tokenized_source(tmp_path):
    raw = write_raw(tmp_path / "raw", {"train": (["a ."], ["b ."]), "val": (["x", "y ."], ["x", "y ."])})
    write_raw(raw, {"test/t": (["t"], ["t"])})
    parts = [
        {"name": "plain", "lines": 1, "tokenized": None},
        {"name": "m", "lines": 1, "tokenized": "moses"},
    ]
    files.write_json(
        raw / "manifest.json",
        {
            "src_lang": "de",
            "tgt_lang": "en",
            "splits": {
                "train": [{"name": "plain", "lines": 0}, {"name": "m", "lines": 1, "tokenized": "moses"}],
                "val": [{"name": "heldout", "lines": 2, "parts": parts}],
                "test": [{"name": "t", "lines": 1}],
            },
        },
    )
    stats = clean.clean(CLEAN, raw, tmp_path / "clean")
    assert files.read_lines(tmp_path / "clean" / "val.src") == ["x", "y."]
    assert stats["val"]["detokenized"] == {"src": 1, "tgt": 1}
    assert files.read_lines(tmp_path / "clean" / "train.src") == ["a."]


# --- rules for web-crawled data, per source ----------------------------------------------------------

WEB = [
    ("Ein Mann fährt mit dem Fahrrad über eine Brücke.", "A man rides a bike across a bridge."),  # kept
    ("Zwei Hunde spielen im Schnee.", "Zwei Hunde spielen im Schnee."),  # untranslated
    ("Eine Frau liest ein Buch im Park.", "Une femme lit un livre dans le parc."),  # wrong_language
    ("Es sind 3 Kinder am Strand.", "There are 5 children on the beach."),  # numbers
    ("Mehr unter www.beispiel.de lesen", "Read more about it here"),  # boilerplate
]


def web_raw(tmp_path: Path, origin: str) -> Path:
    """One curated source of the WEB pairs, then one of `origin` (mtdata: web-crawled) of the same."""
    src, tgt = (list(side) for side in zip(*WEB))
    raw = write_raw(tmp_path / "raw", {"train": (src + src, tgt + tgt), **EVAL})
    train = [{"name": "curated", "lines": len(WEB)}, {"name": "crawl", "lines": len(WEB), "origin": origin}]
    files.write_json(raw / "manifest.json", {"src_lang": "de", "tgt_lang": "en", "splits": {"train": train}})
    return raw


def test_web_rules_apply_to_mtdata_sources_by_default_and_count_per_source(tmp_path):
    settings = dataclasses.replace(CLEAN, max_words=20, dedupe=False)
    stats = clean.clean(settings, web_raw(tmp_path, "mtdata"), tmp_path / "clean")
    sources = stats["train"]["sources"]
    assert sources["curated"]["lines_out"] == len(WEB)  # clean.filters: [] for curated sets
    dropped = {reason: n for reason, n in sources["crawl"]["dropped"].items() if n}
    assert dropped == {"untranslated": 1, "wrong_language": 1, "numbers": 1, "boilerplate": 1}
    assert sources["crawl"]["lines_out"] == 1


def test_a_sources_own_rules_win_over_the_defaults(tmp_path):
    settings = dataclasses.replace(
        CLEAN, max_words=20, dedupe=False, source_filters={"curated": ("untranslated",), "crawl": ()}
    )
    stats = clean.clean(settings, web_raw(tmp_path, "mtdata"), tmp_path / "clean")
    sources = stats["train"]["sources"]
    assert {r: n for r, n in sources["curated"]["dropped"].items() if n} == {"untranslated": 1}
    assert sources["crawl"]["lines_out"] == len(WEB)


def test_a_sources_own_rules_may_name_it_as_data_train_does(tmp_path):
    settings = dataclasses.replace(CLEAN, source_filters={"mtdata:OPUS-x-v1-deu-eng": ("untranslated",)})
    assert cleaning.chosen_rules(settings, "mtdata-OPUS-x-v1-deu-eng", "mtdata") == ("untranslated",)
    assert cleaning.chosen_rules(settings, "other", "") == settings.filters


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            {"source_filters": {"my-crawl": ["langid"]}},
            "clean.source_filters.my-crawl: is not a train source",
        ),
        ({"min_words": 0}, "clean.min_words: must be at least 1"),
        ({"min_script_ratio": 1.5}, "clean.min_script_ratio: must be in (0, 1]"),
        ({"filters": ["langid", "spam"]}, "clean.filters"),
    ],
)
def test_a_rule_setting_out_of_range_is_refused_naming_the_key(tmp_path, change, says):
    raw = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    raw["clean"].update(change)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(params.ParamsError, match=re.escape(says)):
        params.load(path)
