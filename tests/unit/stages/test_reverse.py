"""The reverse stage's checks before it trains, and the swapped corpus it trains on."""

import dataclasses
import json

import pytest

from pipeline import files
from pipeline import params as P
from pipeline.errors import ParamsError, UserError
from pipeline.stages.reverse import check_sources, reverse_params, swap_raw
from tests.support.repo import BASE


def with_bt(mono: tuple[str, ...] = ("multi30k-train",), **data: object) -> P.Params:
    bt = dataclasses.replace(BASE.backtranslation, enabled=True, mono=mono)
    return dataclasses.replace(BASE, backtranslation=bt, data=dataclasses.replace(BASE.data, **data))


def raw_dir(tmp_path, tags: list[str] | None = None):
    raw = tmp_path / "raw"
    (raw / "test").mkdir(parents=True)
    with files.PairedWriter(raw / "train") as w:
        w.write_lines("src", ["<2en> Ein Hund." if tags else "Ein Hund.", "Eine Katze."])
        w.write_lines("tgt", ["A dog.", "A cat."])
    for stem in ("val", "test/t"):
        with files.PairedWriter(raw / stem) as w:
            w.write_lines("src", ["Ein Baum."])
            w.write_lines("tgt", ["A tree."])
    manifest = {"src_lang": "de", "tgt_lang": "en", "splits": {"train": [{"name": "x", "lines": 2}]}}
    files.write_json(raw / "manifest.json", manifest | ({"tags": tags} if tags else {}))
    return raw


def test_an_unknown_or_wrong_language_mono_source_stops_it_before_training(tmp_path):
    raw = raw_dir(tmp_path)
    check_sources(with_bt(), raw)  # multi30k-train has an English side
    with pytest.raises(
        ParamsError, match=r"^backtranslation.mono\[0\]: no catalog set or data.sources entry"
    ):
        check_sources(with_bt(("no-such-set",)), raw)
    with pytest.raises(ParamsError, match=r"multi30k-train is .* with no 'ms' side"):
        check_sources(with_bt(src_lang="en", tgt_lang="ms", train=("tico19-enms",)), raw)


def test_a_bitext_from_several_source_languages_is_refused(tmp_path):
    sources = {"fr": P.CorpusSpec(catalog="multi30k-train", src_lang="fr")}
    params = with_bt(train=("multi30k-train", "fr"), sources=sources)
    with pytest.raises(
        UserError, match="the train sources translate from de, fr; its reverse model needs one"
    ):
        check_sources(params, raw_dir(tmp_path))


def test_with_tags_the_target_language_must_have_one(tmp_path):
    with pytest.raises(UserError, match=r"tags are <2id>, <2ms>, and data.tgt_lang \(en\) has none"):
        check_sources(with_bt(), raw_dir(tmp_path, tags=["<2id>", "<2ms>"]))


def test_the_swapped_corpus_has_the_sides_exchanged_and_no_tags(tmp_path):
    swap_raw(raw_dir(tmp_path, tags=["<2en>", "<2xx>"]), tmp_path / "swapped")
    assert files.read_lines(tmp_path / "swapped/train.src") == ["A dog.", "A cat."]
    assert files.read_lines(tmp_path / "swapped/train.tgt") == ["Ein Hund.", "Eine Katze."]
    assert files.read_lines(tmp_path / "swapped/test/t.src") == ["A tree."]
    manifest = json.loads((tmp_path / "swapped/manifest.json").read_text())
    assert (manifest["src_lang"], manifest["tgt_lang"]) == ("en", "de") and "tags" not in manifest


def test_the_reverse_model_trains_with_its_own_sections_and_no_back_translation():
    r = reverse_params(with_bt())
    assert (r.data.src_lang, r.data.tgt_lang) == ("en", "de")
    assert r.model == BASE.backtranslation.reverse.model and r.train == BASE.backtranslation.reverse.train
    assert not r.backtranslation.enabled
    assert P.from_dict(r.to_dict()) == r  # what --work/params.yaml holds loads and validates


def scored(reverse: str | None) -> P.Params:
    score = dataclasses.replace(BASE.clean.score, forward="fwd", reverse=reverse, drop_worst=0.1)
    clean = dataclasses.replace(BASE.clean, web_filters=("langid", "score"), filters=("score",), score=score)
    return dataclasses.replace(with_bt(), clean=clean)


def test_the_reverse_corpus_is_scored_by_the_score_models_swapped_or_not_at_all_with_a_forward_only():
    both = reverse_params(scored("rev")).clean
    assert (both.score.forward, both.score.reverse) == ("rev", "fwd") and both.web_filters == (
        "langid",
        "score",
    )
    alone = reverse_params(scored(None)).clean
    assert alone.score.forward is None and (alone.filters, alone.web_filters) == ((), ("langid",))
    assert P.from_dict(reverse_params(scored(None)).to_dict()).clean == alone  # it validates
