"""Monolingual text for back-translation: the side in data.tgt_lang of each source, or a refusal
that names the source; normalized, deduplicated and sampled."""

import dataclasses

import pytest

from pipeline import params as P
from pipeline.data.mono import read_mono
from pipeline.data.planning import plan_monolingual
from pipeline.errors import ParamsError
from tests.support.repo import BASE


def test_a_catalog_set_gives_its_side_in_the_target_language_or_is_refused():
    data = BASE.data  # de -> en
    plan, side = plan_monolingual("multi30k-train", "backtranslation.mono[0]", data)
    assert side == "tgt" and plan.langs == ("de", "en")
    to_malay = dataclasses.replace(data, src_lang="en", tgt_lang="ms")
    refusal = r"^backtranslation.mono\[0\]: multi30k-train is .*with no 'ms' side"
    with pytest.raises(ParamsError, match=refusal):
        plan_monolingual("multi30k-train", "backtranslation.mono[0]", to_malay)


def test_a_file_of_one_side_must_be_in_the_target_language():
    english = dataclasses.replace(BASE.data, sources={"news": P.CorpusSpec(src="news.de")})
    with pytest.raises(
        ParamsError, match=r"gives only its src side, text in de, not in data.tgt_lang \(en\)"
    ):
        plan_monolingual("news", "backtranslation.mono[0]", english)


def mono_params(sources: dict[str, P.CorpusSpec], max_lines: int | None = None) -> P.Params:
    data = dataclasses.replace(BASE.data, sources=sources)
    bt = dataclasses.replace(BASE.backtranslation, enabled=True, mono=tuple(sources), max_lines=max_lines)
    return dataclasses.replace(BASE, data=data, backtranslation=bt)


def test_lines_are_normalized_deduplicated_and_cut_to_max_words(tmp_path):
    (tmp_path / "a.en").write_text(
        "A  dog.\nA dog.\n\n" + "word " * 151 + "\nCaf\u0065\u0301.\n", encoding="utf-8"
    )
    rows = "Ein Hund.\tA dog.\nEine Katze.\tA cat.\n"
    (tmp_path / "b.tsv").write_text(rows, encoding="utf-8")
    sources = {"a": P.CorpusSpec(tgt=str(tmp_path / "a.en")), "b": P.CorpusSpec(file=str(tmp_path / "b.tsv"))}
    mono = read_mono(mono_params(sources), None, tmp_path)
    assert mono.lines == ["A dog.", "Caf\u00e9.", "A cat."]  # one space, NFC; b's "A dog." seen in a
    assert mono.stats["sources"] == {
        "a": {"lines_in": 5, "lines_out": 2},
        "b": {"lines_in": 2, "lines_out": 1},
    }


def test_max_lines_keeps_a_seeded_sample_in_corpus_order(tmp_path):
    (tmp_path / "a.en").write_text("".join(f"Line {i}.\n" for i in range(100)), encoding="utf-8")
    params = mono_params({"a": P.CorpusSpec(tgt=str(tmp_path / "a.en"))}, max_lines=10)
    first, again = (read_mono(params, None, tmp_path).lines for _ in range(2))
    assert first == again and len(first) == 10
    assert first == sorted(first, key=lambda line: int(line.split()[1][:-1]))
    other = dataclasses.replace(params.backtranslation, seed=2)
    assert read_mono(dataclasses.replace(params, backtranslation=other), None, tmp_path).lines != first
