"""Decoding on the GPU: the KV-cached search equals the uncached one, the Translator runs one worker
on CUDA (threads would only contend for the one device), and the GPU translates as the CPU does."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from pipeline.decoding.search import translate_ids
from pipeline.decoding.translator import Translator
from pipeline.model.transformer import build_model
from pipeline.tokens import N_SPECIAL
from tests.support.models import make_model_dir, tiny_model_params
from tests.support.repo import BASE

pytestmark = pytest.mark.cuda

VOCAB = 20


def tiny_model(device: torch.device, seed: int = 3) -> torch.nn.Module:
    """A small random model with untied outputs, so that its outputs vary (as tests/unit's search tests)."""
    cfg = tiny_model_params(max_positions=64, tie_embeddings="none", positions="learned")
    torch.manual_seed(seed)
    return build_model(cfg, VOCAB, VOCAB).to(device).eval()


def random_seqs(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(N_SPECIAL, VOCAB) for _ in range(rng.randint(1, 9))] for _ in range(n)]


def decode(model, seqs, device, beam: int, sampling=None, **options):
    settings = dataclasses.replace(
        BASE.decode, beam=beam, length_penalty=1.0, max_len_a=1.0, max_len_b=5, batch_tokens=400, n_best=beam
    )
    if sampling is not None:
        settings = dataclasses.replace(settings, sampling=sampling)
    return translate_ids(model, seqs, settings, device=device, **options)


def tokens_and_scores(results) -> tuple[list, list]:
    return [[h.tokens for h in r] for r in results], [[h.score for h in r] for r in results]


@pytest.mark.parametrize("beam", [1, 5])
def test_cached_search_equals_uncached_on_the_gpu(beam, cuda):
    model, seqs = tiny_model(cuda), random_seqs(16)
    cached, cached_scores = tokens_and_scores(decode(model, seqs, cuda, beam))
    naive, naive_scores = tokens_and_scores(decode(model, seqs, cuda, beam, use_cache=False))
    assert cached == naive
    for a, b in zip(cached_scores, naive_scores):
        assert a == pytest.approx(b, abs=1e-4)
    assert len({tuple(r[0]) for r in cached}) >= 3  # the outputs differ between inputs: a real check


@pytest.mark.parametrize("beam", [1, 5])
def test_the_gpu_decodes_as_the_cpu_does(beam, cuda):
    seqs = random_seqs(16, seed=1)
    on_gpu, gpu_scores = tokens_and_scores(decode(tiny_model(cuda), seqs, cuda, beam))
    cpu = torch.device("cpu")
    on_cpu, cpu_scores = tokens_and_scores(decode(tiny_model(cpu), seqs, cpu, beam))
    assert on_gpu == on_cpu
    for a, b in zip(gpu_scores, cpu_scores):
        assert a == pytest.approx(b, abs=1e-4)


def test_the_translator_runs_one_worker_on_cuda_and_asking_for_more_changes_nothing(tmp_path, cuda):
    translator = Translator.from_dir(make_model_dir(tmp_path / "model"), "cuda")
    assert translator.workers == 1
    assert next(translator.model.parameters()).device.type == "cuda"
    lines = ["der hund läuft", "eine katze springt über die straße", "", "das kind"] * 3
    one = translator.translate(lines, beam=3)
    translator.workers = 2  # search_batches forces 1 on CUDA
    assert translator.translate(lines, beam=3) == one
    assert one[2] == "" and len(one) == len(lines)


def test_sampling_on_the_gpu_is_seeded_cached_and_draws_the_cpus_samples(cuda):
    """The draws come from CPU generators, so a float32 model samples the same tokens on either device."""
    settings = dataclasses.replace(BASE.decode.sampling, enabled=True, top_p=0.9, temperature=1.3, seed=4)
    seqs = random_seqs(16)

    def sample(device, **options):
        model = tiny_model(device)
        return tokens_and_scores(decode(model, seqs, device, 1, sampling=settings, **options))[0]

    on_gpu = sample(cuda)
    assert on_gpu == sample(cuda) == sample(cuda, use_cache=False)
    assert on_gpu == sample(torch.device("cpu"))
