"""Subword sampling: a new segmentation each epoch, the same for the same (seed, epoch), made in a child."""

from __future__ import annotations

import dataclasses
import itertools
import json
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from pipeline.data import sampling
from pipeline.data.sampling import Prefetcher, Sampling, read_text, sample_epoch
from pipeline.data.vocab import Vocab
from pipeline.errors import UserError
from tests.support.models import make_text_corpus
from tests.support.repo import REPO

DROPOUT = Sampling("bpe_dropout", alpha=0.3, nbest=-1, seed=1)
UNIGRAM = Sampling("unigram", alpha=0.1, nbest=-1, seed=1)


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def corpus(request, tmp_path_factory):
    """(paths, sampling, vocab, text) of a small text corpus with a model of each type."""
    paths = make_text_corpus(tmp_path_factory.mktemp(request.param), model_type=request.param, n_train=300)
    assert paths.clean_dir is not None
    vocab = Vocab.load(paths.bpe_dir, threads=1)
    assert vocab.model_type == request.param
    how = DROPOUT if request.param == "bpe" else UNIGRAM
    return paths, how, vocab, read_text(paths.clean_dir, 300)


def sentences(segmented: sampling.Segmented) -> list[list[int]]:
    ids, offsets = segmented
    return [ids[a:b].tolist() for a, b in itertools.pairwise(offsets)]


def test_every_epoch_segments_the_sentences_afresh(corpus):
    _, how, vocab, text = corpus
    epochs = [sentences(sample_epoch(vocab, text, how, epoch)[0]) for epoch in (1, 2, 3)]
    deterministic = vocab.encode_src(text[0])
    for a, b in [(0, 1), (1, 2), (0, 2)]:
        differ = sum(x != y for x, y in zip(epochs[a], epochs[b]))
        assert differ > len(text[0]) // 4, f"epochs {a + 1} and {b + 1} share most segmentations"
    assert sum(x != y for x, y in zip(epochs[0], deterministic)) > len(text[0]) // 4
    # a segmentation is still the sentence: it decodes to the text
    assert [vocab.decode_src(ids) for ids in epochs[1]] == text[0]


def test_the_same_seed_and_epoch_give_the_same_segmentation_whatever_ran_before(corpus):
    _, how, vocab, text = corpus
    first = sample_epoch(vocab, text, how, 2)
    sample_epoch(vocab, text, how, 7)  # draws in between change nothing
    again = sample_epoch(vocab, text, how, 2)
    for (ids_a, off_a), (ids_b, off_b) in zip(first, again):
        assert np.array_equal(ids_a, ids_b) and np.array_equal(off_a, off_b)
    other_seed = sample_epoch(vocab, text, Sampling(how.kind, how.alpha, how.nbest, seed=2), 2)
    assert not np.array_equal(other_seed[0][0], first[0][0])


def test_unigram_sampling_among_the_n_best_varies_and_repeats(tmp_path_factory):
    paths = make_text_corpus(tmp_path_factory.mktemp("nbest"), model_type="unigram", n_train=300)
    vocab = Vocab.load(paths.bpe_dir, threads=1)
    text = read_text(paths.clean_dir, 300)
    how = Sampling("unigram", alpha=0.5, nbest=4, seed=1)
    one, two, again = (sentences(sample_epoch(vocab, text, how, e)[0]) for e in (1, 2, 1))
    assert one == again and sum(a != b for a, b in zip(one, two)) > 30
    for line, ids in zip(text[0], one):
        assert ids in [best for best, _ in vocab.nbest("src", line, 4)]  # one of the 4 best, always


def test_sides_are_sampled_independently(corpus):
    _, how, vocab, text = corpus
    src, tgt = (sentences(side) for side in sample_epoch(vocab, text, how, 1))
    assert text[0] == text[1]  # a copy task: the same text on both sides ...
    assert src != tgt  # ... segmented by different draws


def test_a_fresh_process_samples_the_same_epoch(corpus, tmp_path):
    paths, how, vocab, text = corpus
    here = sample_epoch(vocab, text, how, 3)
    script = (
        "import sys, numpy as np; from pathlib import Path\n"
        "from pipeline.data.sampling import Sampling, read_text, sample_epoch\n"
        "from pipeline.data.vocab import Vocab\n"
        f"how = Sampling({how.kind!r}, {how.alpha}, {how.nbest}, {how.seed})\n"
        f"text = read_text(Path({str(paths.clean_dir)!r}), 300)\n"
        f"(ids, off), _ = sample_epoch(Vocab.load(Path({str(paths.bpe_dir)!r}), threads=1), text, how, 3)\n"
        f"np.save({str(tmp_path / 'ids.npy')!r}, ids)\n"
    )
    subprocess.run([sys.executable, "-c", script], cwd=REPO, check=True)
    assert np.array_equal(np.load(tmp_path / "ids.npy"), here[0][0])


def test_the_prefetcher_hands_over_the_epochs_in_order_as_sampled_here(corpus):
    paths, how, vocab, text = corpus
    prefetcher = Prefetcher(paths.bpe_dir, text, how, first=2)
    try:
        got = {epoch: prefetcher.get(epoch) for epoch in (2, 3)}
        got[6] = prefetcher.get(6)  # not the next: the child restarts there (a resumed run)
        got[7] = prefetcher.get(7)
    finally:
        prefetcher.close()
    for epoch, sides in got.items():
        want = sample_epoch(vocab, text, how, epoch)
        for (ids_a, off_a), (ids_b, off_b) in zip(sides, want):
            assert np.array_equal(ids_a, ids_b) and np.array_equal(off_a, off_b), epoch


def test_closing_stops_a_child_forked_from_a_training_that_handles_sigterm(corpus):
    """Training installs SIGINT/SIGTERM handlers that only ask the loop to stop (signals.py); the
    child forked under them must still go when close() terminates it, blocked handing over an epoch
    the run will never train (an early stop), or the run hangs at its end."""
    paths, how, _, text = corpus
    before = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        prefetcher = Prefetcher(paths.bpe_dir, text, how, first=1)
        prefetcher.get(1)
        time.sleep(0.5)  # the child samples epoch 2 and blocks on the full queue
        closing = threading.Thread(target=prefetcher.close)
        began = time.monotonic()
        closing.start()
        closing.join(timeout=30)
    finally:
        signal.signal(signal.SIGTERM, before)
    assert not closing.is_alive() and not prefetcher._process.is_alive()
    assert prefetcher._process.exitcode == -signal.SIGTERM  # it went on SIGTERM, not on the fallback kill
    assert time.monotonic() - began < sampling._CLOSE_S


def test_a_child_that_fails_fails_the_run_with_its_error(corpus, tmp_path):
    _, how, _, text = corpus
    prefetcher = Prefetcher(tmp_path / "no-such-bpe", text, how, first=1)
    try:
        with pytest.raises((RuntimeError, UserError)):
            prefetcher.get(1)
    finally:
        prefetcher.close()


def test_clean_text_that_is_not_what_data_bin_encodes_is_refused(corpus, tmp_path):
    paths, *_ = corpus
    with pytest.raises(
        UserError, match=r"train.src has 300 lines but the binarized train split 299 sentences"
    ):
        read_text(paths.clean_dir, 299)
    with pytest.raises(
        UserError, match=r"missing; train.subword_sampling segments the clean text each epoch"
    ):
        read_text(tmp_path, 300)


def test_sampling_is_off_by_default_and_carries_the_train_settings(params):
    assert Sampling.of(params.train) is None
    import dataclasses

    t = dataclasses.replace(params.train, subword_sampling="bpe_dropout", subword_alpha=0.2)
    assert Sampling.of(t) == Sampling("bpe_dropout", 0.2, -1, t.seed)


def test_block_seeds_differ_by_epoch_side_and_block():
    seeds = {sampling.block_seed(1, e, s, b) for e in range(3) for s in range(2) for b in range(3)}
    assert len(seeds) == 18 and all(0 <= x < 2**32 for x in seeds)


def sampled_with_tags(how, tmp_path, lines: list[str], tags: list[str], vocab_size: int):
    """A vocabulary trained on `lines` (both sides) with `tags` as pieces, and epoch 1's sampled
    source segmentation of them, alpha 0.5."""
    from pipeline.stages.bpe import train_bpe
    from tests.support.models import bpe_params

    clean = tmp_path / "clean"
    clean.mkdir()
    for side in ("src", "tgt"):
        (clean / f"train.{side}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (clean / "stats.json").write_text(json.dumps({"tags": tags}), encoding="utf-8")
    kind = "bpe" if how.kind == "bpe_dropout" else "unigram"
    train_bpe(bpe_params(vocab_size=vocab_size, model_type=kind), clean, tmp_path / "bpe")
    vocab = Vocab.load(tmp_path / "bpe", threads=1)
    (src, _) = sample_epoch(vocab, (lines, lines), dataclasses.replace(how, alpha=0.5), 1)
    return vocab, sentences(src)


@pytest.mark.parametrize("how", [DROPOUT, UNIGRAM], ids=["bpe_dropout", "unigram"])
def test_a_target_language_tag_is_never_split(how, tmp_path):
    # "<", "2", "x", "a", ">" are all characters of the text, so a sampler could spell the tag with them
    lines = [f"<2x{'ab'[i % 2]}> a<b 2x >a{'bc'[i % 3 % 2]} x{i % 7}" for i in range(300)]
    vocab, segmented = sampled_with_tags(how, tmp_path, lines, ["<2xa>", "<2xb>"], 22)
    assert sum(s != d for s, d in zip(segmented, vocab.encode_src(lines))) > len(lines) // 4  # it samples
    for line, ids in zip(lines, segmented):
        assert vocab.src_pieces(ids)[:2] == ["▁", line[:5]] and vocab.decode_src(ids) == line


@pytest.mark.parametrize("how", [DROPOUT, UNIGRAM], ids=["bpe_dropout", "unigram"])
def test_the_backtranslation_tag_is_never_split(how, tmp_path):
    # "<", "B", "T", ">" are all characters of the text, so a sampler could spell the tag with them
    lines = [f"<BT> a<B T>a{'bc'[i % 3 % 2]} x{i % 7}" if i % 2 else f"a<B T>b x{i % 5}" for i in range(300)]
    vocab, segmented = sampled_with_tags(how, tmp_path, lines, ["<BT>"], 23)
    assert sum(s != d for s, d in zip(segmented, vocab.encode_src(lines))) > len(lines) // 10  # it samples
    for line, ids in zip(lines, segmented):
        pieces = vocab.src_pieces(ids)
        assert ("<BT>" in pieces) == line.startswith("<BT>") and vocab.decode_src(ids) == line
