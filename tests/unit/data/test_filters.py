"""The rules for web-crawled pairs: each drops its kind of noise and passes clean pairs."""

from __future__ import annotations

import pytest

from pipeline.data import filters
from pipeline.data.filters import Rules, noise_reason

DE_EN = ("de", "en")
CLEAN = ("Ein Mann fährt mit dem Fahrrad über eine Brücke.", "A man rides a bike across a bridge.")


@pytest.mark.parametrize(
    ("pair", "langs", "rules", "reason"),
    [
        (("Hallo", "Hello there you"), DE_EN, Rules(min_words=2), "too_few_words"),
        (("Mehr unter www.example.de", "More at the site"), DE_EN, Rules(boilerplate=True), "boilerplate"),
        (("<div><a href=x>", "<div><a href=x>"), DE_EN, Rules(boilerplate=True), "boilerplate"),
        (("Ja ja ja ja ja", "yes"), DE_EN, Rules(repeated=True), "repeated"),
        (("Der Hund, bellt!", "der hund bellt"), DE_EN, Rules(untranslated=True), "untranslated"),
        (("Es sind 3 Hunde.", "There are 4 dogs."), DE_EN, Rules(numbers=True), "numbers"),
        (("Der Hund bellt.", "Собака лает."), ("ru", "de"), Rules(min_script_ratio=0.5), "script"),
        ((CLEAN[0], "Un homme fait du vélo sur un pont."), DE_EN, Rules(langid=True), "wrong_language"),
    ],
)
def test_each_rule_drops_its_kind_of_noise(pair, langs, rules, reason):
    assert noise_reason(*pair, langs, rules) == reason
    assert noise_reason(*pair, langs, filters.OFF) is None  # and nothing when off


def test_a_clean_pair_passes_every_rule():
    every = Rules(
        min_words=2,
        boilerplate=True,
        repeated=True,
        untranslated=True,
        numbers=True,
        min_script_ratio=0.9,
        langid=True,
    )
    assert every.any and not filters.OFF.any
    assert noise_reason(*CLEAN, DE_EN, every) is None
    assert noise_reason("Es sind 1.000 Hunde.", "There are 1,000 dogs.", DE_EN, every) is None
    assert (
        noise_reason("Kucing itu tidur di atas meja.", "The cat sleeps on the table.", ("ms", "en"), every)
        is None
    )


def test_the_script_share_counts_letters_only_and_skips_unknown_languages():
    assert filters.script_ratio("Москва 2024!", "ru") == 1.0
    assert filters.script_ratio("Moskva", "ru") == 0.0
    assert filters.script_ratio("whatever", "xx") == 1.0


def test_the_identifier_says_what_py3langid_says_line_for_line():
    from py3langid.langid import classify

    texts = [
        "Ein Hund läuft über die Straße.",
        "A dog runs across the street.",
        "Un chien traverse la rue.",
        "Pes běží přes ulici.",
        "Собака бежит через улицу.",
        "Seekor anjing berlari melintasi jalan.",
        "ALL CAPS SHOUTING HERE",
        "12345",
        "",
    ]
    assert [filters.identify(t) for t in texts] == [classify(t)[0] for t in texts]
