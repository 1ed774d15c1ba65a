"""Beam search: cache vs no cache, greedy, exhaustive optimality, order, batching, limits; sampling;
the n-gram ban."""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import random
import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pipeline import params as P
from pipeline.data.batching import collate_src
from pipeline.decoding.batches import fit_to_model, length_batches, spread_batches
from pipeline.decoding.beam import top_candidates
from pipeline.decoding.sampling import draw_tokens
from pipeline.decoding.search import translate_ids
from pipeline.decoding.steps import (
    BANNED,
    Hypothesis,
    SearchStats,
    ban_repeated_ngrams,
    length_penalty,
    step_log_probs,
)
from pipeline.model.transformer import DecoderState, Seq2SeqBase, build_model
from pipeline.tokens import BOS, EOS, N_SPECIAL
from tests.support.models import tiny_model_params
from tests.support.repo import REPO

BASE = P.load(REPO / "params.yaml")

CONFIGS = [
    ("encoder_decoder", "pre", "learned"),
    ("encoder_decoder", "post", "learned"),
    ("encoder_decoder", "pre", "sinusoidal"),
    ("decoder_only", "pre", "learned"),
    ("decoder_only", "post", "sinusoidal"),
]


def tiny_model(
    arch: str = "encoder_decoder",
    norm: str = "pre",
    positions: str = "learned",
    vocab: int = 20,
    seed: int = 0,
    max_positions: int = 64,
) -> Seq2SeqBase:
    """A small random model; untied output embeddings keep its outputs varied (tied ones echo the input)."""
    cfg = tiny_model_params(
        arch=arch, norm=norm, positions=positions, max_positions=max_positions, tie_embeddings="none"
    )
    torch.manual_seed(seed)
    return build_model(cfg, vocab, vocab).eval()


def random_seqs(n: int, vocab: int, seed: int = 0, longest: int = 9) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(N_SPECIAL, vocab) for _ in range(rng.randint(1, longest))] for _ in range(n)]


SEARCH_ONLY = ("use_cache", "stats", "workers")  # translate_ids' own, not settings


def decode(model: Seq2SeqBase, seqs: list[list[int]], **kw) -> list[list[Hypothesis]]:
    """translate_ids with decode settings of a test's size, as `kw` changes them."""
    search = {k: kw.pop(k) for k in SEARCH_ONLY if k in kw}
    settings = dict(beam=4, length_penalty=1.0, max_len_a=1.0, max_len_b=3, batch_tokens=10_000) | kw
    return translate_ids(model, seqs, dataclasses.replace(BASE.decode, **settings), device="cpu", **search)


def teacher_forced_log_probs(model: Seq2SeqBase, seq: list[int], outs: list[list[int]]) -> list[float]:
    """Sum of log p(out + EOS | seq) for each of `outs` (all one length), by one uncached forward pass."""
    tgt_in = torch.tensor([[BOS, *out] for out in outs])  # (N, T)
    tgt_out = torch.tensor([[*out, EOS] for out in outs])  # (N, T)
    with torch.no_grad():
        logits = model(collate_src([seq] * len(outs)), tgt_in)  # (N, T, V)
    lprobs = F.log_softmax(logits.float(), dim=-1).gather(2, tgt_out[:, :, None])  # (N, T, 1)
    return lprobs.sum(dim=(1, 2)).tolist()


def reference_greedy(model: Seq2SeqBase, seq: list[int], max_len: int, alpha: float) -> Hypothesis:
    """Greedy decoding written independently of beam.py: argmax of the full forward pass."""
    out: list[int] = []
    total = 0.0
    with torch.no_grad():
        for step in range(max_len + 1):
            logits = model(collate_src([seq]), torch.tensor([[BOS, *out]]))[0, -1]
            lprobs = F.log_softmax(logits.float(), dim=-1)
            lprobs[list(BANNED)] = float("-inf")
            token = EOS if step == max_len else int(lprobs.argmax())
            total += float(lprobs[token])
            if token == EOS:
                break
            out.append(token)
    return Hypothesis(out, total / length_penalty(len(out) + 1, alpha))


def tokens_of(results: list[list[Hypothesis]]) -> list[list[list[int]]]:
    return [[h.tokens for h in hyps] for hyps in results]


def assert_scores_close(a: list[list[Hypothesis]], b: list[list[Hypothesis]], tol: float = 1e-4) -> None:
    for x, y in zip(a, b, strict=True):
        assert [h.score for h in x] == pytest.approx([h.score for h in y], abs=tol)


@pytest.mark.parametrize("arch,norm,positions", CONFIGS)
@pytest.mark.parametrize("beam", [1, 4])
def test_cached_and_uncached_decoding_agree(arch: str, norm: str, positions: str, beam: int) -> None:
    model = tiny_model(arch, norm, positions, seed=3)  # a seed whose outputs vary in every config
    seqs = random_seqs(8, 20)
    cached = decode(model, seqs, beam=beam, n_best=beam)
    naive = decode(model, seqs, beam=beam, n_best=beam, use_cache=False)
    assert tokens_of(cached) == tokens_of(naive)
    assert_scores_close(cached, naive)
    # The comparison means something only if the outputs differ between inputs.
    best = [tuple(r[0].tokens) for r in cached]
    assert len(set(best)) >= 3 and len({t for b in best for t in b}) >= 3


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_beam_one_is_greedy(arch: str) -> None:
    model = tiny_model(arch)
    seqs = random_seqs(6, 20, seed=1)
    results = decode(model, seqs, beam=1, max_len_a=0.5, max_len_b=2)
    for seq, hyps in zip(seqs, results):
        want = reference_greedy(model, seq, int(0.5 * len(seq) + 2), alpha=1.0)
        assert hyps[0].tokens == want.tokens
        assert hyps[0].score == pytest.approx(want.score, abs=1e-4)


def output_space(vocab: int, max_len: int) -> list[list[int]]:
    """Every output the search can produce: up to max_len allowed tokens (EOS follows each)."""
    allowed = [t for t in range(vocab) if t not in BANNED and t != EOS]
    return [list(s) for n in range(max_len + 1) for s in itertools.product(allowed, repeat=n)]


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_exhaustive_beam_finds_the_exact_argmax(arch: str, alpha: float) -> None:
    vocab, max_len = N_SPECIAL + 5, 3  # UNK + 5 tokens: 1 + 6 + 36 + 216 = 259 outputs
    model = tiny_model(arch, vocab=vocab, seed=3)
    seq = [5, 7, 9, 6]
    space = output_space(vocab, max_len)
    assert len(space) == 259
    want = []
    for n in range(max_len + 1):
        outs = [out for out in space if len(out) == n]
        lp = length_penalty(n + 1, alpha)
        want += [(total / lp, out) for total, out in zip(teacher_forced_log_probs(model, seq, outs), outs)]
    want.sort(key=lambda pair: -pair[0])
    width = len(space)
    (got,) = decode(
        model, [seq], beam=width, n_best=width, length_penalty=alpha, max_len_a=0.0, max_len_b=max_len
    )
    # A beam as wide as the space finishes every output, each scored exactly.
    assert sorted(map(tuple, (h.tokens for h in got))) == sorted(map(tuple, space))
    assert got[0].tokens == want[0][1]
    scores = {tuple(h.tokens): h.score for h in got}
    for score, out in want:
        assert scores[tuple(out)] == pytest.approx(score, abs=1e-4)


def test_order_follows_input_and_batching_changes_nothing() -> None:
    model = tiny_model("encoder_decoder")
    rng = random.Random(5)
    seqs = random_seqs(12, 20, seed=5, longest=14)
    rng.shuffle(seqs)
    stats = SearchStats()
    batched = decode(model, seqs, batch_tokens=150, stats=stats)
    assert stats.batches > 2, "the budget should split the input into several batches"
    alone = [decode(model, [s])[0] for s in seqs]
    assert tokens_of(batched) == tokens_of(alone)
    assert_scores_close(batched, alone)


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_a_sentence_does_not_depend_on_its_batch_companions(arch: str) -> None:
    model = tiny_model(arch)
    target = [6, 9, 12, 7]
    companions = random_seqs(5, 20, seed=8, longest=16)  # longer ones pad the target
    with_others = decode(model, [*companions[:2], target, *companions[2:]], n_best=4)[2]
    alone = decode(model, [target], n_best=4)[0]
    assert [h.tokens for h in with_others] == [h.tokens for h in alone]
    assert_scores_close([with_others], [alone])


def test_empty_input_gives_empty_output_without_running_the_model(monkeypatch) -> None:
    model = tiny_model()

    def refuse(*args, **kwargs):
        raise AssertionError("the model ran on empty input")

    monkeypatch.setattr(model, "start", refuse)
    monkeypatch.setattr(model, "forward", refuse)
    results = decode(model, [[], [], []], n_best=3)
    assert results == [[Hypothesis([], 0.0)]] * 3
    monkeypatch.undo()
    mixed = decode(model, [[], [5, 6, 7], []])
    assert len(mixed) == 3 and mixed[0] == mixed[2] == [Hypothesis([], 0.0)]
    assert mixed[1] == decode(model, [[5, 6, 7]])[0]


def test_n_best_gives_distinct_hypotheses_sorted_by_score() -> None:
    model = tiny_model("decoder_only")
    for hyps in decode(model, random_seqs(4, 20, seed=2), beam=5, n_best=5):
        assert len(hyps) == 5
        assert len({tuple(h.tokens) for h in hyps}) == 5
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)


def test_output_never_exceeds_max_length() -> None:
    model = tiny_model("encoder_decoder", seed=2)
    seqs = random_seqs(10, 20, seed=4, longest=12)
    for seq, hyps in zip(seqs, decode(model, seqs, n_best=4, max_len_a=0.5, max_len_b=1)):
        assert all(len(h.tokens) <= int(0.5 * len(seq) + 1) for h in hyps)


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_too_long_inputs_are_truncated_and_counted_never_dropped(arch: str, caplog) -> None:
    model = tiny_model(arch, positions="learned", max_positions=12)
    seqs = [[5] * 3, [6] * 30, [7] * 11, [8] * 40]
    stats = SearchStats()
    with caplog.at_level(logging.WARNING, logger="pipeline.decoding.batches"):
        results = decode(model, seqs, max_len_a=1.0, max_len_b=2, stats=stats)
    assert len(results) == 4 and all(results)
    assert stats.truncated == (3 if arch == "decoder_only" else 2)
    assert f"{stats.truncated} of 4 inputs" in caplog.text
    for seq in seqs:  # every position fits the table: sources and outputs together
        kept, max_len = fit_to_model(model, seq, 1.0, 2)
        used = len(kept) + 2 + max_len if arch == "decoder_only" else max(len(kept) + 1, max_len + 1)
        assert used <= 12


def test_sinusoidal_positions_never_truncate() -> None:
    model = tiny_model(positions="sinusoidal", max_positions=8)
    assert fit_to_model(model, [5] * 30, 1.0, 2) == ([5] * 30, 32)


def test_length_batches_respect_the_budget_and_cover_every_input() -> None:
    lengths = [3, 0, 10, 7, 7, 1, 25, 4]
    batches = length_batches(lengths, beam=2, batch_tokens=60)
    assert sorted(i for b in batches for i in b) == [0, 2, 3, 4, 5, 6, 7]  # the empty one is skipped
    for batch in batches:
        widest = max(lengths[i] for i in batch) + 1
        assert len(batch) == 1 or len(batch) * 2 * widest <= 60


def cost(batch: list[int], lengths: list[int]) -> int:
    """B x the widest source (+ EOS): what a batch's budget bounds."""
    return len(batch) * (max(lengths[i] for i in batch) + 1)


@pytest.mark.parametrize("n, workers", [(32, 2), (64, 2), (256, 2), (300, 3)])
def test_spread_batches_give_every_worker_an_equal_share(n: int, workers: int) -> None:
    """A multiple of `workers` batches, none over the budget, the widest no wider than
    length_batches' widest, and the last round as full as the others: no worker idles."""
    rng = np.random.default_rng(n)
    lengths = [int(x) for x in rng.integers(5, 26, size=n)] + [0]
    packed, spread = length_batches(lengths, 5, 4096), spread_batches(lengths, 5, 4096, workers)
    assert sorted(i for b in spread for i in b) == list(range(n))  # the empty one skipped, as before
    assert len(spread) % workers == 0 and len(spread) >= len(packed)
    assert all(5 * cost(b, lengths) <= 4096 for b in spread)
    costs = [cost(b, lengths) for b in spread]
    assert max(costs) <= max(cost(b, lengths) for b in packed)
    assert min(costs) >= 0.5 * max(costs), costs  # length_batches' last batch: often a third


def test_one_worker_or_too_few_sentences_keep_length_batches() -> None:
    lengths = [9, 4, 12, 7]
    assert spread_batches(lengths, 5, 4096, 1) == length_batches(lengths, 5, 4096)
    assert spread_batches([9, 0], 5, 4096, 2) == [[0]]
    few = [9, 4] * 15  # 30 sentences: two batches of 15 would be slower than one of 30
    assert spread_batches(few, 5, 4096, 2) == length_batches(few, 5, 4096)
    assert len(length_batches(few, 5, 4096)) == 1


def test_decoding_restores_the_training_mode() -> None:
    model = tiny_model().train()
    decode(model, [[5, 6]])
    assert model.training


@pytest.mark.parametrize("k, vocab", [(1, 50), (4, 50), (4, 6), (5, 7)])
def test_top_candidates_are_the_best_sums_over_all_extensions(k: int, vocab: int) -> None:
    """Taking each beam's best 2K first selects exactly what ranking all k x V sums would."""
    torch.manual_seed(k * vocab)
    n, beam = 3, max(k, 2)
    scores = torch.randn(n, k) * 3
    lprobs = step_log_probs(torch.randn(n * k, vocab), torch.zeros(n * k, dtype=torch.bool))
    values, parents, words = top_candidates(scores, lprobs, beam)
    totals = (scores[:, :, None] + lprobs.view(n, k, vocab)).view(n, -1)  # every extension
    width = min(2 * beam, int(totals.isfinite().sum(1).min()))
    expected = totals.topk(width, dim=1)
    assert torch.equal(values[:, :width], expected.values)
    assert torch.equal(parents[:, :width] * vocab + words[:, :width], expected.indices)


def test_step_log_probs_writes_over_its_input_and_equals_log_softmax() -> None:
    logits = torch.randn(4, 12)
    expected = F.log_softmax(logits, dim=-1)
    expected[:, list(BANNED)] = float("-inf")
    force = torch.tensor([False, True, False, False])
    expected[1] = torch.where(torch.arange(12) == EOS, expected[1], float("-inf"))
    got = step_log_probs(logits.clone(), force)
    assert torch.equal(got, expected)


def test_workers_decode_batches_in_threads_and_change_nothing(monkeypatch) -> None:
    model = tiny_model("encoder_decoder")
    seqs = random_seqs(12, 20, seed=5, longest=14)
    alone = decode(model, seqs, batch_tokens=150)
    seen: list[tuple[int, int]] = []  # (thread, its torch threads) of each batch
    start = model.start

    def recording(*args, **kwargs):
        assert torch.is_inference_mode_enabled()
        seen.append((threading.get_ident(), torch.get_num_threads()))
        return start(*args, **kwargs)

    monkeypatch.setattr(model, "start", recording)
    threads = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        stats = SearchStats()
        parallel = decode(model, seqs, batch_tokens=150, workers=2, stats=stats)
        assert torch.get_num_threads() == 4  # restored after
    finally:
        torch.set_num_threads(threads)
    assert stats.batches == len(seen) > 2
    assert len({thread for thread, _ in seen} - {threading.get_ident()}) == 2
    assert {n for _, n in seen} == {2}  # the threads shared out
    assert tokens_of(parallel) == tokens_of(alone)
    assert_scores_close(parallel, alone)


def test_greedy_takes_the_first_of_the_two_best_extensions() -> None:
    """Beam 1's one candidate is the best of the 2K = 2 the general rule would rank."""
    torch.manual_seed(4)
    lprobs = step_log_probs(torch.randn(3, 30), torch.zeros(3, dtype=torch.bool))
    scores = torch.randn(3, 1)
    values, parents, words = top_candidates(scores, lprobs, beam=1)
    ranked = (scores + lprobs).topk(2, dim=1)  # every extension of the one beam, the 2 best
    assert values.shape == words.shape == parents.shape == (3, 1)
    assert torch.equal(words[:, 0], ranked.indices[:, 0]) and torch.equal(values[:, 0], ranked.values[:, 0])
    assert torch.equal(parents, torch.zeros(3, 1, dtype=torch.long))


def test_workers_decode_under_the_callers_autocast() -> None:
    model = tiny_model("encoder_decoder", seed=3)
    seqs = random_seqs(12, 20, seed=6, longest=14)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        one = decode(model, seqs, batch_tokens=150)
        two = decode(model, seqs, batch_tokens=150, workers=2)
    fp32 = decode(model, seqs, batch_tokens=150)
    assert tokens_of(two) == tokens_of(one)
    assert_scores_close(two, one, tol=1e-4)
    assert max(abs(a[0].score - b[0].score) for a, b in zip(two, fp32)) > 1e-3  # bf16 really ran


def test_the_caches_are_sized_once_for_the_longest_output(monkeypatch) -> None:
    model = tiny_model("encoder_decoder")
    states = []
    start = model.start
    monkeypatch.setattr(model, "start", lambda *a, **kw: states.append(start(*a, **kw)) or states[-1])
    seqs = random_seqs(6, 20, seed=3)
    decode(model, seqs, max_len_a=1.0, max_len_b=3)
    room = max(len(s) for s in seqs) + 3 + 1  # the start token, then up to max_len tokens
    (state,) = states
    assert {c.self_attn.buffers[0].size(2) for c in state.caches} == {room}  # never regrown


def test_recording_attention_keeps_one_worker(monkeypatch) -> None:
    model = tiny_model("encoder_decoder")
    threads = []
    start = model.start

    def recording_thread(*args, **kwargs):
        threads.append(threading.get_ident())
        return start(*args, **kwargs)

    monkeypatch.setattr(model, "start", recording_thread)
    with model.recording_attention() as records:
        decode(model, random_seqs(12, 20, seed=5, longest=14), batch_tokens=150, workers=2)
    assert len(threads) > 2 and set(threads) == {threading.get_ident()}
    assert records


# --- sampling ------------------------------------------------------------------------


def sampling(**kw) -> P.SamplingParams:
    return dataclasses.replace(BASE.decode.sampling, **{"enabled": True, **kw})


def sample(model: Seq2SeqBase, seqs: list[list[int]], n_best: int = 1, **kw) -> list[list[Hypothesis]]:
    """Draw n_best samples per input with decode.sampling's defaults, as `kw` changes them."""
    searched = ("batch_tokens", "max_len_a", "max_len_b", "use_cache", "no_repeat_ngram_size")
    search = {k: kw.pop(k) for k in list(kw) if k in searched}
    return decode(model, seqs, beam=1, n_best=n_best, sampling=sampling(**kw), **search)


class FixedDistribution(Seq2SeqBase):
    """A model whose every step has the same logits (V,), whatever the source and prefix."""

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.cfg = tiny_model_params(positions="sinusoidal")
        self.logits = logits

    def start(self, src: torch.Tensor, steps: int = 0) -> DecoderState:
        return DecoderState(caches=[], positions=torch.zeros(src.size(0), dtype=torch.long))

    def step(self, tokens: torch.Tensor, state: DecoderState) -> torch.Tensor:
        return self.logits.expand(tokens.size(0), -1).clone()  # (R, V): the search writes over it


def allowed_probs(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """The model's distribution as the search sees it (banned tokens 0), tempered."""
    lprobs = F.log_softmax(logits, dim=-1)
    lprobs[list(BANNED)] = float("-inf")
    return torch.softmax(lprobs / temperature, dim=-1)


# Tokens 5.. in falling likelihood; EOS least likely, so that outputs run to max_len.
RANKED = torch.tensor([0.0, 1.0, 0.0, -4.0, 0.0] + [2.0 - 0.1 * i for i in range(15)])


def drawn_tokens(results: list[list[Hypothesis]]) -> collections.Counter:
    return collections.Counter(t for hyps in results for h in hyps for t in h.tokens)


@pytest.mark.parametrize("top_k", [1, 3, 6])
def test_top_k_draws_only_among_the_k_likeliest_tokens(top_k: int) -> None:
    model = FixedDistribution(RANKED)
    results = sample(model, [[5, 6]], n_best=200, top_k=top_k, max_len_a=0.0, max_len_b=5)
    likeliest = set(allowed_probs(RANKED).topk(top_k).indices.tolist())
    assert set(drawn_tokens(results)) == likeliest  # each of the k drawn, none else
    assert EOS not in likeliest and all(len(h.tokens) == 5 for h in results[0])  # EOS only when forced


@pytest.mark.parametrize("top_p", [0.05, 0.3, 0.6])
def test_top_p_draws_only_within_the_nucleus(top_p: float) -> None:
    model = FixedDistribution(RANKED)
    probs, ids = allowed_probs(RANKED).sort(descending=True)
    size = int((probs.cumsum(0) < top_p).sum()) + 1  # the smallest prefix reaching top_p
    results = sample(model, [[5, 6]], n_best=200, top_p=top_p, max_len_a=0.0, max_len_b=5)
    assert set(drawn_tokens(results)) == set(ids[:size].tolist())
    assert size == 1 or size >= 3  # the cases mean something: one token, and several


def test_top_k_applies_before_top_p() -> None:
    model = FixedDistribution(RANKED)
    results = sample(model, [[5]], n_best=200, top_k=2, top_p=0.6, max_len_a=0.0, max_len_b=5)
    assert set(drawn_tokens(results)) == set(allowed_probs(RANKED).topk(2).indices.tolist())


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
def test_draws_follow_the_tempered_distribution(temperature: float) -> None:
    model = FixedDistribution(RANKED)
    results = sample(model, [[5]], n_best=500, temperature=temperature, max_len_a=0.0, max_len_b=4)
    counts = drawn_tokens(results)
    want = allowed_probs(RANKED, temperature)
    want[EOS] = 0.0  # EOS draws end a sample: count the tokens before it
    want /= want.sum()
    total = sum(counts.values())
    assert total > 1500
    for token in range(RANKED.numel()):
        assert counts[token] / total == pytest.approx(float(want[token]), abs=0.03), token


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_top_k_one_is_greedy(arch: str) -> None:
    model = tiny_model(arch, seed=3)
    seqs = random_seqs(8, 20, seed=1)
    greedy = decode(model, seqs, beam=1)
    for seed in (1, 2):
        drawn = sample(model, seqs, top_k=1, seed=seed)
        assert tokens_of(drawn) == tokens_of(greedy)
        assert_scores_close(drawn, greedy)


def test_a_near_zero_temperature_is_greedy() -> None:
    model = tiny_model("encoder_decoder", seed=3)
    seqs = random_seqs(8, 20, seed=1)
    greedy = tokens_of(decode(model, seqs, beam=1))
    assert tokens_of(sample(model, seqs, temperature=1e-4)) == greedy
    assert tokens_of(sample(model, seqs, temperature=1.0)) != greedy  # the model's own spread


def test_samples_are_reproducible_under_a_seed_and_differ_across_seeds() -> None:
    model = tiny_model("encoder_decoder", seed=3)
    seqs = random_seqs(8, 20, seed=1)
    first, again = sample(model, seqs, seed=7), sample(model, seqs, seed=7)
    assert tokens_of(first) == tokens_of(again)
    assert_scores_close(first, again, tol=0)
    others = [tokens_of(sample(model, seqs, seed=seed)) for seed in (8, 9)]
    assert all(sum(a != b for a, b in zip(o, tokens_of(first))) >= 4 for o in others)


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_a_sentences_samples_do_not_depend_on_its_batch_order_or_chunk(arch: str) -> None:
    model = tiny_model(arch, seed=3)
    seqs = random_seqs(10, 20, seed=5, longest=14)
    together = sample(model, seqs, n_best=3, seed=4)
    alone = [sample(model, [s], n_best=3, seed=4)[0] for s in seqs]
    stats = SearchStats()
    small = decode(
        model, seqs[::-1], beam=1, n_best=3, sampling=sampling(seed=4), batch_tokens=60, stats=stats
    )
    assert stats.batches > 3
    assert tokens_of(together) == tokens_of(alone) == tokens_of(small[::-1])
    assert_scores_close(together, alone)


def test_cached_and_uncached_sampling_agree() -> None:
    model = tiny_model("encoder_decoder", seed=3)
    seqs = random_seqs(8, 20)
    cached = sample(model, seqs, n_best=2, top_p=0.9, temperature=1.5)
    naive = sample(model, seqs, n_best=2, top_p=0.9, temperature=1.5, use_cache=False)
    assert tokens_of(cached) == tokens_of(naive)
    assert_scores_close(cached, naive)


def test_n_best_samples_are_scored_by_the_models_own_log_probs_best_first() -> None:
    model = tiny_model("encoder_decoder", seed=3)
    seq = [6, 9, 12, 7]
    (hyps,) = sample(model, [seq], n_best=6, temperature=2.0, top_k=5)
    assert len(hyps) == 6 and len({tuple(h.tokens) for h in hyps}) >= 3  # drawn apart
    assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    for h in hyps:  # untempered, uncut: what beam search would score the same output
        (total,) = teacher_forced_log_probs(model, seq, [h.tokens])
        assert h.score == pytest.approx(total / length_penalty(len(h.tokens) + 1, 1.0), abs=1e-4)


def test_samples_never_exceed_max_length_and_empty_inputs_stay_empty() -> None:
    model = tiny_model("encoder_decoder", seed=2)
    seqs = [*random_seqs(6, 20, seed=4, longest=12), []]
    results = sample(model, seqs, n_best=3, temperature=3.0, max_len_a=0.5, max_len_b=1)
    assert results[-1] == [Hypothesis([], 0.0)]
    for seq, hyps in zip(seqs[:-1], results):
        assert len(hyps) == 3 and all(len(h.tokens) <= int(0.5 * len(seq) + 1) for h in hyps)


def test_sampling_with_a_beam_is_a_developers_error() -> None:
    with pytest.raises(ValueError, match="beam must be 1"):
        decode(tiny_model(), [[5, 6]], beam=4, sampling=sampling())


@pytest.mark.parametrize("top_k", [0, 3])
def test_draws_at_the_ends_of_the_interval_pick_the_first_and_last_drawable_tokens(top_k: int) -> None:
    lprobs = step_log_probs(RANKED.repeat(3, 1), torch.zeros(3, dtype=torch.bool))  # PAD, BOS, SEP cut
    tokens = draw_tokens(
        lprobs, torch.tensor([0.0, 1 - 1e-15, 0.5], dtype=torch.float64), sampling(top_k=top_k)
    )
    drawable = sorted(set(range(RANKED.numel())) - set(BANNED))
    if top_k:  # likeliest first: the best, then the k-th best
        assert tokens[:2].tolist() == allowed_probs(RANKED).topk(top_k).indices[[0, -1]].tolist()
    else:  # the vocabulary's order: its first and last drawable ids, never a banned one
        assert tokens[:2].tolist() == [drawable[0], drawable[-1]]
    assert int(tokens[2]) in drawable


# --- the n-gram ban (decode.no_repeat_ngram_size) ---------------------------------------


def banned_by(history: list[int], size: int, vocab: int = 20) -> set[int]:
    """The tokens ban_repeated_ngrams refuses after `history` (the start token, then the output)."""
    lprobs = torch.zeros(1, vocab)
    ban_repeated_ngrams(lprobs, torch.tensor([history]), size)
    return set(lprobs[0].isinf().nonzero().flatten().tolist())


def repeats_an_ngram(tokens: list[int], size: int) -> bool:
    grams = [tuple(tokens[i : i + size]) for i in range(len(tokens) - size + 1)]
    return len(grams) != len(set(grams))


def test_the_ban_refuses_each_token_that_would_repeat_an_ngram_and_never_eos() -> None:
    start = BOS  # the search's start token; never part of an n-gram
    assert banned_by([start, 5, 6, 7, 5, 6], 3) == {7}  # 5 6 7 would come again
    assert banned_by([start, 5, 6, 7, 5, 6], 2) == {7}  # 6 7
    assert banned_by([start, 5, 6, 5, 6, 8, 5], 2) == {6}  # one ban for two matches
    assert banned_by([start, 5, 6, 7, 5, 6], 1) == {5, 6, 7}  # every token output
    assert banned_by([start, 6, 5, 7, 5], 2) == {7}
    assert banned_by([start, 5, EOS, 5], 2) == set()  # 5 EOS would repeat, but a row must be able to end
    assert banned_by([start, 5, 6, 7, 5, 6], 0) == set()  # off
    assert banned_by([start, 5, 5], 3) == set()  # no n-gram of 3 yet
    assert banned_by([start, start, 5], 2) == set()  # the start token is not output


def reference_greedy_without_repeats(
    model: Seq2SeqBase, seq: list[int], max_len: int, size: int
) -> Hypothesis:
    """Greedy with the ban, written apart from steps.py: Python sets of n-grams, full forward passes,
    and the score the model's unrenormalized log-probs (the ban removes tokens, not mass)."""
    out: list[int] = []
    total = 0.0
    with torch.no_grad():
        for step in range(max_len + 1):
            lprobs = F.log_softmax(
                model(collate_src([seq]), torch.tensor([[BOS, *out]]))[0, -1].float(), dim=-1
            )
            lprobs[list(BANNED)] = float("-inf")
            seen = {tuple(out[i : i + size]) for i in range(len(out) - size + 1)}
            tail = tuple(out[len(out) - size + 1 :]) if size > 1 else ()
            for token in range(lprobs.numel()):
                if token != EOS and len(out) >= size and (*tail, token) in seen:
                    lprobs[token] = float("-inf")
            token = EOS if step == max_len else int(lprobs.argmax())
            total += float(lprobs[token])
            if token == EOS:
                break
            out.append(token)
    return Hypothesis(out, total / length_penalty(len(out) + 1, 1.0))


@pytest.mark.parametrize("size", [1, 2, 3])
def test_greedy_with_the_ban_equals_a_reference_in_tokens_and_scores(size: int) -> None:
    model = tiny_model("encoder_decoder", seed=3, vocab=12)  # few tokens: outputs repeat without the ban
    seqs = random_seqs(12, 12, seed=2, longest=12)
    plain = decode(model, seqs, beam=1, max_len_a=1.5)
    assert any(repeats_an_ngram(hyps[0].tokens, size) for hyps in plain)  # so that the ban has work
    found = decode(model, seqs, beam=1, max_len_a=1.5, no_repeat_ngram_size=size)
    for seq, (hyp,) in zip(seqs, found):
        want = reference_greedy_without_repeats(model, seq, int(1.5 * len(seq) + 3), size)
        assert hyp.tokens == want.tokens
        assert hyp.score == pytest.approx(want.score, abs=1e-4)


@pytest.mark.parametrize("size", [1, 2, 3])
@pytest.mark.parametrize("how", ["beam", "sampling"])
def test_no_hypothesis_repeats_an_ngram_of_the_banned_size(size: int, how: str) -> None:
    model = FixedDistribution(RANKED)  # always the same favourite: unbanned outputs are one token repeated
    seqs = random_seqs(6, 20, seed=1, longest=8)
    kw: dict = dict(max_len_a=2.0, max_len_b=4)
    if how == "sampling":
        plain, found = (
            sample(model, seqs, n_best=3, top_k=2, **kw, no_repeat_ngram_size=n) for n in (0, size)
        )
    else:
        plain, found = (
            decode(model, seqs, beam=4, n_best=4, **kw, no_repeat_ngram_size=n) for n in (0, size)
        )
    assert sum(repeats_an_ngram(h.tokens, size) for hyps in plain for h in hyps) >= len(seqs)
    assert all(not repeats_an_ngram(h.tokens, size) for hyps in found for h in hyps)
    drawable = RANKED.numel() - len(BANNED) - 1  # EOS, the least likely, ends an output only when it must
    for seq, hyps in zip(seqs, found):
        assert all(len(h.tokens) == min(int(2.0 * len(seq) + 4), drawable if size == 1 else 99) for h in hyps)


def test_the_ban_decodes_the_same_with_and_without_the_cache() -> None:
    model = tiny_model("decoder_only", seed=3, vocab=12)
    seqs = random_seqs(8, 12, seed=4, longest=10)
    cached = decode(model, seqs, beam=4, n_best=2, no_repeat_ngram_size=2)
    assert tokens_of(cached) == tokens_of(
        decode(model, seqs, beam=4, n_best=2, no_repeat_ngram_size=2, use_cache=False)
    )
    assert tokens_of(cached) != tokens_of(decode(model, seqs, beam=4, n_best=2))
