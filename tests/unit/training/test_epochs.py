"""The train split epoch by epoch: token batches of the sentences that fit, each source's draws,
and with subword sampling a segmentation of its own each epoch.

The corpora are synthetic (tests/support/models.py): random subword ids in
binarize's format, or real text through a tiny sentencepiece model.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from pipeline import params as P
from pipeline.data import batching
from pipeline.data.batching import token_batches
from pipeline.data.vocab import Vocab
from pipeline.errors import UserError
from pipeline.training.distributed import ALONE
from pipeline.training.epochs import TrainSplit
from pipeline.training.loop import Trainer
from pipeline.training.state import Paths
from tests.support.models import make_corpus, make_text_corpus, tiny_params, tiny_raw


def split(params: P.Params, paths: Paths) -> TrainSplit:
    return TrainSplit(params, paths, Vocab.load(paths.bpe_dir), ALONE, say=print)


def test_epoch_batches_are_token_batches_of_the_fitting_sentences(tmp_path):
    paths = make_corpus(tmp_path, n_train=80, lengths=(2, 12))
    params = tiny_params(dict(arch="decoder_only", positions="learned", max_positions=20))
    trainer = split(params, paths)
    ids, data, t = trainer.ids, trainer.data, params.train
    assert 0 < len(ids) < len(data)  # some sentences are too long
    for epoch in (1, 2):
        expected = token_batches(
            data.src.lengths[ids], data.tgt.lengths[ids], t.max_tokens, shuffle=True, seed=t.seed, epoch=epoch
        )
        expected = [ids[b].tolist() for b in expected]
        assert [b.tolist() for b in trainer.batches(epoch)] == expected
        usable = len(expected) - len(expected) % 2
        for rank in (0, 1):  # rank r of two: every other batch of the same list, from r
            shard = batching.epoch_batches(
                data, t.max_tokens, shuffle=True, seed=t.seed, epoch=epoch, rank=rank, world_size=2, ids=ids
            )
            assert [b.tolist() for b in shard] == expected[rank:usable:2]
    first, second = trainer.batches(1), trainer.batches(2)
    assert [b.tolist() for b in first] != [b.tolist() for b in second]  # reshuffled every epoch
    for batches in (first, second):  # every fitting sentence once, no other
        assert np.sort(np.concatenate(batches)).tolist() == ids.tolist()


def test_source_weights_decide_each_sources_draws_per_epoch(tmp_path):
    paths = make_corpus(tmp_path, n_train=60, lengths=(2, 8))
    meta = (
        json.loads((paths.bin_dir / "meta.json").read_text())
        if (paths.bin_dir / "meta.json").is_file()
        else {}
    )
    meta["sources"] = [{"name": "news", "sentences": 40}, {"name": "web", "sentences": 20}]
    (paths.bin_dir / "meta.json").write_text(json.dumps(meta))
    natural = split(tiny_params(), paths)
    assert natural.sources.natural and natural.sources.drawn_per_epoch() == {"news": 40, "web": 20}
    every = np.sort(np.concatenate(natural.batches(1)))
    assert every.tolist() == natural.ids.tolist()  # the default: every fitting pair once, as before

    def sourced(**train) -> P.Params:  # params whose data.train names the corpus's two sources
        raw = tiny_raw(**train)
        raw["data"]["train"] = ["news", "web"]
        return P.from_dict(raw)

    weighted = split(sourced(source_weights={"web": 2.5}), paths)
    assert weighted.sources.drawn_per_epoch() == {"news": 40, "web": 50}
    for epoch in (1, 2):
        drawn = np.concatenate(weighted.batches(epoch))
        counts = np.bincount(drawn, minlength=60)
        assert counts[:40].tolist() == [1] * 40 and counts[40:].sum() == 50
        assert set(counts[40:].tolist()) == {2, 3}
    trainer = Trainer(sourced(source_weights={"web": 2.5}), paths)
    assert trainer.summary(0)["pairs_drawn_per_epoch"] == {"news": 40, "web": 50}  # summary.json's

    flat = split(sourced(source_temperature=100.0), paths)
    assert flat.sources.drawn_per_epoch() == {"news": 30, "web": 30}  # nearly equal shares of 60

    blog = sourced()  # params that name a source the binarized corpus lacks (it was built from others)
    blog = dataclasses.replace(blog, train=dataclasses.replace(blog.train, source_weights={"blog": 2.0}))
    with pytest.raises(
        UserError, match=r"train.source_weights: no train source named blog; the train sources are news, web"
    ):
        split(blog, paths)


# --- subword sampling -------------------------------------------------------------------------


def test_with_sampling_each_epoch_trains_on_its_own_segmentation_batched_by_its_lengths(tmp_path):
    paths = make_text_corpus(tmp_path, n_train=80)
    trainer = split(tiny_params(subword_sampling="bpe_dropout", subword_alpha=0.3), paths)
    try:
        one, two = trainer.for_epoch(1), trainer.for_epoch(2)
        assert len(one) == len(two) == len(trainer.data) == 80
        assert not np.array_equal(one.src.lengths, two.src.lengths)  # resegmented
        assert trainer.for_epoch(2) is two  # one segmentation an epoch, made once
        # sampling splits words further than data/bin's segmentation: longer, and batched by that
        assert one.src.lengths.sum() > trainer.data.src.lengths.sum()
        batches = trainer.batches(2)
        widest = [int(np.maximum(two.src.lengths[b], two.tgt.lengths[b]).max()) + 1 for b in batches]
        assert all(
            len(b) * w <= trainer.params.train.max_tokens or len(b) == 1 for b, w in zip(batches, widest)
        )
        assert sorted(np.concatenate(batches).tolist()) == list(range(80))
    finally:
        trainer.close()


def test_without_sampling_the_epochs_train_on_data_bin(tmp_path):
    paths = make_text_corpus(tmp_path, n_train=40)
    trainer = split(tiny_params(), paths)
    assert trainer.for_epoch(1) is trainer.for_epoch(2) is trainer.data


def test_sampling_of_the_wrong_kind_for_the_model_or_without_the_text_is_refused(tmp_path):
    paths = make_text_corpus(tmp_path, n_train=40)  # a BPE model
    raw = tiny_params().to_dict()
    raw["bpe"]["model_type"] = "unigram"
    raw["train"].update(subword_sampling="unigram")
    with pytest.raises(
        UserError, match=r"train.subword_sampling: unigram needs a unigram model, but .* holds a bpe"
    ):
        split(P.from_dict(raw), paths)
    no_text = Paths(paths.bin_dir, paths.bpe_dir, paths.out_dir, paths.ckpt_dir, paths.log_dir)
    with pytest.raises(UserError, match=r"segments the clean text each epoch; pass --clean data/clean"):
        split(tiny_params(subword_sampling="bpe_dropout"), no_text)
