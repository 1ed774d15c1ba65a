"""The cleaning rules on chunks of pairs, without files: each drop has its reason and only train is
filtered; which lines of a split ship tokenized (the stage's own tests: tests/unit/stages/test_clean.py)."""

from __future__ import annotations

from pipeline.data import cleaning
from pipeline.data.cleaning import NO_HELDOUT, Heldout, clean_lines, digest
from pipeline.params import CleanParams, PairScoreParams

RULES = CleanParams(
    max_words=4,
    max_ratio=3.0,
    dedupe=True,
    decontaminate=True,
    filters=(),
    web_filters=(),
    source_filters={},
    min_words=1,
    min_script_ratio=0.5,
    score=PairScoreParams(
        forward=None, reverse=None, drop_worst=0.0, max_score=None, relative=True, batch_tokens=4000
    ),
)


def test_each_dropped_train_pair_carries_its_first_reason_and_val_keeps_all():
    src = ["ein Haus", "", "eins zwei drei vier fünf", "ja", "im Test"]
    tgt = ["a house", "empty", "one two three four five", "yes indeed, truly so", "in the test"]
    heldout = Heldout(frozenset({digest("im Test")}), frozenset())
    train = clean_lines(src, tgt, RULES, train=True, heldout=heldout)
    reasons = [cleaning.DROP_REASONS[code - 1] if code else None for code in train.codes]
    assert reasons == [None, "empty", "too_long", "ratio", "heldout_overlap"]
    assert (train.src, train.tgt) == (["ein Haus"], ["a house"])
    assert train.hashes == digest("ein Haus\na house")  # what dedupe compares: the normalized pair
    val = clean_lines(src, tgt, RULES, train=False, heldout=NO_HELDOUT)
    assert val.codes == bytes(5) and val.src == src and val.hashes == b""


def test_tokenized_ranges_follow_the_manifests_order_of_sources():
    m = {
        "splits": {
            "train": [
                {"name": "a", "lines": 3},
                {"name": "b", "lines": 2, "tokenized": "moses"},
                {"name": "c", "lines": 4},
                {"name": "d", "lines": 1, "tokenized": "moses"},
            ],
            "test": [{"name": "x", "lines": 5}, {"name": "y", "lines": 6, "tokenized": "moses"}],
        }
    }
    assert cleaning.tokenized_ranges(m, "train") == ((3, 5), (9, 10))
    assert cleaning.tokenized_ranges(m, "test/y") == ((0, 6),)
    assert cleaning.tokenized_ranges(m, "test/x") == cleaning.tokenized_ranges({}, "val") == ()


def test_a_target_language_tag_is_kept_but_the_rules_see_the_text_after_it():
    src = ["<2ms> ein Haus", "<2id> ein Haus", "<2ms> eins zwei drei vier", "<2id> im  Test", "<2ms>  "]
    tgt = ["sebuah rumah", "sebuah rumah", "satu dua tiga empat", "dalam ujian", "kosong"]
    heldout = Heldout(frozenset({digest("im Test")}), frozenset())
    train = clean_lines(src, tgt, RULES, train=True, heldout=heldout)
    reasons = [cleaning.DROP_REASONS[code - 1] if code else None for code in train.codes]
    # four words and a tag: not too long; a test line behind a tag still overlaps; a tag alone is empty
    assert reasons == [None, None, None, "heldout_overlap", "empty"]
    assert train.src == ["<2ms> ein Haus", "<2id> ein Haus", "<2ms> eins zwei drei vier"]
    hashes = [train.hashes[i : i + cleaning.HASH_BYTES] for i in range(0, len(train.hashes), 8)]
    assert hashes[0] != hashes[1]  # the same pair asked of two languages: two pairs, not duplicates
    val = clean_lines(src, tgt, RULES, train=False, heldout=NO_HELDOUT)
    assert val.src == [*src[:3], "<2id> im Test", "<2ms>"]  # normalized after the tag; a bare tag
