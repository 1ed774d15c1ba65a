"""The catalog of named sets: it loads, it matches the mirror, lookup and pair filtering, the pinned sums."""

from __future__ import annotations

import re

import pytest
import yaml

from pipeline.data import containers, corpora, fetch, formats
from pipeline.data.detok import TOKENIZERS
from pipeline.errors import UserError
from tests.support.corpora import M30K

M30K_SPLITS = ("train", "val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco", "test_2018_flickr")


def test_the_catalog_loads_with_unique_names_and_whole_entries():
    names = list(yaml.safe_load(corpora.CATALOG.read_text(encoding="utf-8")))
    assert len(names) == len(set(names)) == len(corpora.SETS)
    for named in corpora.SETS.values():
        assert named.lines > 0 and named.corpus and named.domain and named.license
        assert len(named.langs) >= 2 and len(set(named.langs)) == len(named.langs)
        assert all(re.fullmatch(r"[a-z]{2}", lang) for lang in named.langs), named.name
        assert all(re.fullmatch(r"[0-9a-f]{64}", side.sha256) for side in named.sides), named.name
        assert all(side.url.startswith("https://") for side in named.sides), named.name
        assert named.tokenized in (None, *TOKENIZERS), named.name


def test_mlqe_pe_sets_read_archive_members_and_say_they_are_moses_tokenized():
    for split, member in (("train", "train"), ("dev", "dev"), ("test", "test20")):
        named = corpora.lookup(f"mlqe-pe-ruen-{split}")
        assert named.tokenized == "moses"
        assert named.side("ru").member.endswith(f"/{member}.src")
        assert named.side("en").member.endswith(f"/{member}.pe")  # the human post-edit, not the MT
        assert named.side("ru").url == named.side("en").url  # one archive holds both sides


def test_multi30k_has_every_split_in_every_language_it_exists_in():
    for split in M30K_SPLITS:
        named = corpora.lookup(f"multi30k-{split}")
        has_cs = split not in ("test_2017_flickr", "test_2017_mscoco")
        assert named.langs == ("de", "en", "fr", "cs") if has_cs else ("de", "en", "fr")
        assert named.side("en").url == f"{M30K}{split}.en.gz"


def test_pinned_sums_are_the_catalogs_one_per_url():
    for named in corpora.SETS.values():
        for side in named.sides:
            assert corpora.PINNED_SHA256[side.url] == side.sha256
    # the NTREX English source serves three sets: one URL, one sum
    assert len(corpora.PINNED_SHA256) == len({side.url for s in corpora.SETS.values() for side in s.sides})


def test_every_entry_matches_the_mirror(mirror):
    """Each file's sha256 and line count (decoded as the download stage decodes it) as the catalog says."""
    listed = {line.split("  ./", 1)[1] for line in (mirror / "SHA256SUMS").read_text().splitlines()}
    covered = set()
    for named in corpora.SETS.values():
        for side in named.sides:
            path = fetch.mirror_path(mirror, side.url)
            covered.add(path.relative_to(mirror).as_posix())
            assert fetch.sha256_file(path) == side.sha256, side.url
            data = path.read_bytes()
            if side.member is not None:
                data = containers.archive_member(data, side.member, side.url)
            assert len(formats.text_lines(data, side.url)) == named.lines, (side.url, side.member)
    # every corpus file in the mirror is named by some set (a license file beside one is not a corpus)
    assert covered == {path for path in listed if not path.endswith("/LICENSE")}


def test_lookup_refuses_an_unknown_name_with_the_closest_ones():
    assert corpora.lookup("newstest2018-ruen").side("ru").url.endswith("/testsets/ru-en/newstest2018.ru")
    with pytest.raises(UserError, match=r"no set named 'newstest2018-enru'.*did you mean .*2018-ruen"):
        corpora.lookup("newstest2018-enru")
    with pytest.raises(UserError, match=r"no set named 'zzz'.*python -m pipeline corpora"):
        corpora.lookup("zzz")


def test_a_pair_finds_sets_in_either_direction_with_sides_in_the_pairs_order():
    en_ru = {s.name: s for s in corpora.for_pair("en", "ru")}
    ru_en = {s.name: s for s in corpora.for_pair("ru", "en")}
    assert set(en_ru) == set(ru_en)
    assert {"newstest2018-ruen", "tatoeba-v2021-08-07-enru", "tico19-enru", "ntrex128-enru"} <= set(en_ru)
    assert en_ru["newstest2018-ruen"].langs == ("en", "ru")  # catalog order is ru, en
    assert ru_en["newstest2018-ruen"].langs == ("ru", "en")
    assert en_ru["newstest2018-ruen"].sides == tuple(reversed(ru_en["newstest2018-ruen"].sides))
    assert all(named.langs == ("fr", "cs") for named in corpora.for_pair("fr", "cs"))
    assert [s.name for s in corpora.for_pair("cs", "fr")] == [
        "multi30k-train",
        "multi30k-val",
        "multi30k-test_2016_flickr",
        "multi30k-test_2018_flickr",
    ]
    assert corpora.for_pair("ru", "ms") == []


def test_a_side_a_set_lacks_is_refused_with_the_sides_it_has():
    with pytest.raises(UserError, match=r"multi30k-test_2017_mscoco has no cs side; it has de, en, fr"):
        corpora.lookup("multi30k-test_2017_mscoco").oriented("cs", "en")


@pytest.mark.parametrize("pair", ["deen", "de-", "de-en-fr", "en-en", "-en"])
def test_a_malformed_pair_is_refused_with_the_expected_form(pair):
    with pytest.raises(UserError, match=r"expected two different language codes as SRC-TGT, e.g. de-en"):
        corpora.parse_pair(pair)
    assert corpora.parse_pair("en-ru") == ("en", "ru")
