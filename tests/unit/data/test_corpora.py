"""The corpora known by URL: every Multi30k file has its pinned sha256."""

from pipeline.data import corpora


def test_pinned_table_covers_every_multi30k_file():
    for name in ("train", "val", *corpora.MULTI30K_TESTS):
        for lang in corpora.MULTI30K_LANGS:
            assert len(corpora.PINNED_SHA256[corpora.MULTI30K_URL.format(split=name, lang=lang)]) == 64
