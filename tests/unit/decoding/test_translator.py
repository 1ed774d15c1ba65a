"""Translator: text in, translations out, on a tiny random model with a tiny sentencepiece model."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pipeline.decoding import translator as tr
from pipeline.decoding.translator import Translator
from pipeline.errors import UserError
from tests.support.models import make_model_dir


def test_translator_uses_the_models_settings_and_keeps_line_count(translator: Translator) -> None:
    assert translator.settings.beam == 3
    out = translator.translate(["ein hund läuft", "", "   \t ", "die katze"])
    assert len(out) == 4 and out[1] == out[2] == ""
    assert out[0] and out[3], "a random model still produces some tokens for this seed"


def test_input_is_normalized_as_the_training_text_was(translator: Translator) -> None:
    plain = translator.translate(["ein hund läuft"])
    messy = translator.translate(["  ein\u00a0hund \t la\u0308uft\u200b  "])  # NBSP, tab, NFD, ZWSP
    assert messy == plain


def test_overrides_reach_the_search(translator: Translator) -> None:
    greedy = translator.translate(["der mann"], beam=1)
    assert greedy == translator.translate(["der mann"], beam=1, batch_tokens=1)
    with pytest.raises(UserError, match=r"n_best: must be within \[1, beam=3\]"):
        translator.translate_nbest(["der mann"], 4, beam=3)


def test_translate_nbest_gives_k_sorted_translations(translator: Translator) -> None:
    (hyps, blank) = translator.translate_nbest(["der hund springt über die straße", ""], 3)
    assert len(hyps) == 3 and [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    assert blank == [tr.Translation("", 0.0)]
    assert hyps[0].text == translator.translate(["der hund springt über die straße"])[0]


def test_vocab_size_mismatch_is_a_clear_error(tmp_path: Path) -> None:
    model_dir = make_model_dir(tmp_path / "model", model_vocab=50)
    with pytest.raises(UserError, match="vocabulary has 50 entries but its sentencepiece model has 40"):
        Translator.from_dir(model_dir, device="cpu")


LINES = ["ein hund läuft", "die katze springt über die straße", "", "der mann", "eine frau läuft", "das kind"]


def test_sampling_is_reproducible_under_a_seed_and_differs_across_seeds(translator: Translator) -> None:
    first = translator.translate(LINES, sample=True, seed=3)
    assert first == translator.translate(LINES, sample=True, seed=3)
    assert first[2] == ""
    others = [translator.translate(LINES, sample=True, seed=seed) for seed in (4, 5)]
    assert all(sum(a != b for a, b in zip(o, first)) >= 2 for o in others)


def test_a_lines_sample_does_not_depend_on_the_others_in_the_call(translator: Translator) -> None:
    whole = translator.translate(LINES, sample=True, seed=3, temperature=1.5)
    parts = [translator.translate([line], sample=True, seed=3, temperature=1.5)[0] for line in LINES]
    assert whole == parts == translator.translate(LINES[::-1], sample=True, seed=3, temperature=1.5)[::-1]


def test_sampling_with_top_k_one_is_greedy(translator: Translator) -> None:
    assert translator.translate(LINES, sample=True, top_k=1) == translator.translate(LINES, beam=1)


def test_sampling_from_the_settings_and_n_samples(translator: Translator) -> None:
    settings = dataclasses.replace(
        translator.settings, beam=1, sampling=dataclasses.replace(translator.settings.sampling, enabled=True)
    )
    sampler = Translator(translator.model, translator.vocab, translator.params, settings, translator.device)
    assert sampler.translate(LINES) == translator.translate(LINES, sample=True)
    lists = sampler.translate_nbest(LINES, 5, top_k=10)
    assert [len(ts) for ts in lists] == [5, 5, 1, 5, 5, 5]
    for ts in lists:
        assert [t.score for t in ts] == sorted((t.score for t in ts), reverse=True)
    assert sampler.translate(LINES, sample=False) == translator.translate(LINES, beam=1)


def test_sampling_refusals_name_the_argument_and_the_fix(translator: Translator) -> None:
    with pytest.raises(
        UserError, match=r"^sample=True: sampling draws one token a step and needs beam=1, not 3"
    ):
        translator.translate(LINES, sample=True, beam=3)
    with pytest.raises(UserError, match=r"^top_k: applies to sampling only; turn it on with sample=True$"):
        translator.translate(LINES, top_k=5)
    with pytest.raises(UserError, match=r"^temperature: must be positive"):
        translator.translate(LINES, sample=True, temperature=0.0)
    with pytest.raises(UserError, match=r"^top_p: must be within \(0, 1\]"):
        translator.translate(LINES, sample=True, top_p=1.5)


def test_a_corpus_in_chunks_samples_what_one_call_does(translator: Translator) -> None:
    settings = dataclasses.replace(
        translator.settings,
        beam=1,
        sampling=dataclasses.replace(translator.settings.sampling, enabled=True, top_k=8, seed=9),
    )
    sampler = Translator(translator.model, translator.vocab, translator.params, settings, translator.device)
    corpus = LINES * 3  # a repeated line gets the same sample wherever it is
    chunked = list(sampler.translate_corpus(iter(corpus), chunk_lines=4))
    assert chunked == sampler.translate(corpus) == translator.translate(corpus, sample=True, top_k=8, seed=9)
    assert chunked[: len(LINES)] == chunked[len(LINES) : 2 * len(LINES)]


def test_no_repeat_ngram_size_from_the_settings_or_the_call(translator: Translator) -> None:
    lines = ["der hund springt über die straße", "ein mann"]
    banned = dataclasses.replace(translator.settings, no_repeat_ngram_size=1)
    own = Translator(translator.model, translator.vocab, translator.params, banned, translator.device)
    assert own.translate(lines) == translator.translate(lines, no_repeat_ngram_size=1)
    assert own.translate(lines, no_repeat_ngram_size=0) == translator.translate(lines)
    with pytest.raises(UserError, match=r"^no_repeat_ngram_size: must be non-negative \(0: off\)$"):
        translator.translate(lines, no_repeat_ngram_size=-1)


def test_a_misspelt_setting_is_refused_naming_it(translator: Translator) -> None:
    with pytest.raises(TypeError, match=r"unexpected decode setting 'beem'; the settings: beam, "):
        translator.translate(["ein hund"], beem=3)  # type: ignore[call-arg]
    assert translator.translate(["ein hund"], beam=3) == translator.translate(["ein hund"], beam=3, seed=None)
