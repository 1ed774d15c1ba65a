"""Corpora this project knows by URL: Multi30k's files, and the sha256 pinned for each known file.

A file whose URL is here is verified against its pinned sum wherever it is
named (data.corpus multi30k, or a bitext URL). The sums are those of the
corpus mirror's SHA256SUMS.
"""

from __future__ import annotations

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{split}.{lang}.gz"

MULTI30K_LANGS = ("de", "en", "fr", "cs")

MULTI30K_TESTS = ("test_2016_flickr",)  # the test sets whose sums are pinned below

_M30K = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"

_OPUS = "https://raw.githubusercontent.com/Helsinki-NLP/OPUS-MT-testsets/master/testsets/"

_TATOEBA = _OPUS + "eng-rus/tatoeba-test-v2021-08-07"

_TICO = _OPUS + "en-ms/tico19-test"

# sha256 of every file this project knows by URL (from the corpus mirror's SHA256SUMS).
PINNED_SHA256: dict[str, str] = {
    _M30K + "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    _M30K + "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    _M30K + "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    _M30K + "train.cs.gz": "a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077",
    _M30K + "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    _M30K + "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    _M30K + "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    _M30K + "val.cs.gz": "b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc",
    _M30K + "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    _M30K + "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    _M30K + "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    _M30K + "test_2016_flickr.cs.gz": "200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1",
    _TATOEBA + ".eng": "3d89c0281402c08dd6f8158301bf44586997b7f76070269c9ee4097c4f10fcb2",
    _TATOEBA + ".rus": "643d0d8beedac2add8b8a6523bacdbbb349e438e0139eb5ef9b4cc0f63660cd5",
    _TICO + ".en": "d7369430ce903e5d40f28403686fb81239918f568c35c6b057a32d4c8db81f5f",
    _TICO + ".ms": "2f8707cc2f06f3a9e8b433c4a7dad9c95ae3c7178239aafc0e07a003b7fa0d92",
}
