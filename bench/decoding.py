"""What the decoding benchmark (bench/decode_speed.py) is made of: the model
decoded and its batches, the systems that decode them (our search, HF generate, CTranslate2), each
a Runner over the same batches for exactly --steps steps, and their interleaved timing.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import random
import statistics
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from bench.common import TINY, row
from bench.timing import shuffled_rounds
from pipeline import params as P
from pipeline.data.batching import collate_src
from pipeline.data.text import normalize
from pipeline.data.vocab import Vocab
from pipeline.decoding.batches import default_workers, evaluating, search_batches
from pipeline.decoding.beam import beam_search
from pipeline.decoding.steps import Hypothesis
from pipeline.files import read_lines
from pipeline.interop.hf_export import hf_config
from pipeline.model import checkpoint
from pipeline.model.transformer import Seq2SeqBase, Transformer, build_model
from pipeline.tokens import EOS, N_SPECIAL, PAD

REPO = Path(__file__).resolve().parents[1]
TASKS = {"decode_greedy": 1, "decode_beam5": 5}
RANDOM_VOCAB = 8000
SPECIAL_PIECES = ["<pad>", "<unk>", "<s>", "</s>", "<sep>"]


@dataclasses.dataclass(frozen=True)
class Setup:
    """What one run measures: the full sizes, or tiny ones (--smoke)."""

    sentences: int
    batch_size: int
    steps: int
    repeats: int
    smoke: bool = False


SMOKE_VOCAB = 300

Batch = list[list[int]]  # source ids, without EOS
Runner = Callable[[list[Batch], int], list[int]]  # (batches, beam) -> output tokens of each 1-best


@dataclasses.dataclass
class Subject:
    """The model every system decodes with (or mirrors), and its pieces in id order."""

    model: Seq2SeqBase
    src_pieces: list[str]
    tgt_pieces: list[str]
    vocab: Vocab | None
    label: str


# --- what is decoded ---------------------------------------------------------------


def load_subject(model_dir: Path | None, seed: int) -> Subject:
    """The trained model, or random weights at params.yaml's model dimensions."""
    if model_dir is not None:
        path = model_dir / checkpoint.MODEL_FILE
        model, _ = checkpoint.restore_model(checkpoint.load(path), path)
        vocab = Vocab.load(model_dir)
        src, tgt = vocab.src_pieces(range(vocab.src_size)), vocab.tgt_pieces(range(vocab.tgt_size))
        return Subject(model.eval(), src, tgt, vocab, f"trained model {model_dir}")
    cfg = dataclasses.replace(P.load(REPO / "params.yaml").model, dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(seed)
    model = build_model(cfg, RANDOM_VOCAB, RANDOM_VOCAB).eval()
    pieces = SPECIAL_PIECES + [f"t{i}" for i in range(N_SPECIAL, RANDOM_VOCAB)]
    return Subject(model, pieces, pieces, None, "random weights, params.yaml dimensions, vocabulary 8000")


def smoke_subject(seed: int) -> Subject:
    """A tiny random model: every system runs, in seconds."""
    base = P.load(REPO / "params.yaml").model
    cfg = dataclasses.replace(TINY.of(base), dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(seed)
    model = build_model(cfg, SMOKE_VOCAB, SMOKE_VOCAB).eval()
    pieces = SPECIAL_PIECES + [f"t{i}" for i in range(N_SPECIAL, SMOKE_VOCAB)]
    return Subject(model, pieces, pieces, None, "SMOKE RUN: tiny random model")


def source_ids(subject: Subject, split_file: Path | None, n: int, seed: int) -> list[list[int]]:
    """n non-empty sources: encoded lines of split_file, or random ids (lengths from its word counts)."""
    lines = [normalize(x) for x in read_lines(split_file)] if split_file else []
    lines = [x for x in lines if x][:n]
    rng = random.Random(seed)
    if subject.vocab is not None and lines:
        return subject.vocab.encode_src(lines)
    lengths = [len(x.split()) for x in lines] or [rng.randint(5, 25) for _ in range(n)]
    vocab = len(subject.src_pieces)
    return [[rng.randrange(N_SPECIAL, vocab) for _ in range(max(k, 1))] for k in lengths]


def make_batches(seqs: list[list[int]], size: int) -> list[Batch]:
    """Sorted by length (as every system's own batching would), cut into batches of `size`."""
    ordered = sorted(seqs, key=len, reverse=True)
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


# --- the systems -------------------------------------------------------------------


class _Counted:
    """A decoder state and the steps taken with it (each step feeds every row one token)."""

    def __init__(self, inner: Any):
        self.inner, self.steps = inner, 0

    def reorder(self, index: torch.Tensor, beams: int) -> None:
        self.inner.reorder(index, beams)


class FixedLength(torch.nn.Module):
    """The model, with EOS refused until `length` tokens are out: every output is as long as the
    search's max_len lets it be (the search forces EOS there), so each system compared does the
    same work. CTranslate2's min_decoding_length does this for its own search."""

    def __init__(self, model: Seq2SeqBase, length: int):
        super().__init__()
        self.model, self.length = model, length
        self.cfg, self.start_token = model.cfg, model.start_token

    def start(self, src: torch.Tensor, steps: int = 0) -> _Counted:
        return _Counted(self.model.start(src, steps))

    def step(self, tokens: torch.Tensor, state: _Counted) -> torch.Tensor:
        logits = self.model.step(tokens, state.inner)
        if state.steps < self.length:
            logits[:, EOS] = float("-inf")
        state.steps += 1
        return logits

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:  # NaiveDecoder's way
        logits = self.model(src, tgt_in)
        if tgt_in.size(1) - 1 < self.length:  # tokens fed after the first
            logits[:, -1, EOS] = float("-inf")
        return logits


def torch_runner(
    model: Seq2SeqBase, steps: int, use_cache: bool, workers: int | None = None, device: str = "cpu"
) -> Runner:
    """Our beam search over all batches in one call, each batch as given, every output `steps`
    tokens with its EOS (workers: default_workers), the model on `device`."""
    workers = default_workers(device) if workers is None else workers
    fixed = FixedLength(model, steps - 1)

    def run(batches: list[Batch], beam: int) -> list[int]:
        fitted = [(list(src), steps - 1) for batch in batches for src in batch]
        ends = list(itertools.accumulate(map(len, batches)))
        indices = [list(range(end - len(batch), end)) for batch, end in zip(batches, ends)]

        def search(src: torch.Tensor, max_lens: torch.Tensor, _: list[list[int]]) -> list[list[Hypothesis]]:
            return beam_search(fixed, src, max_lens, beam=beam, alpha=1.0, use_cache=use_cache)

        with evaluating(model):
            found = search_batches(fixed, fitted, indices, search, workers=workers, device=device)
        return [len(hyps[0].tokens) + 1 for batch in found for hyps in batch]  # + the forced EOS

    return run


def per_batch(run: Callable[[Batch, int], list[int]]) -> Runner:
    """A runner that takes one batch at a time, over all batches in turn."""
    return lambda batches, beam: [n for batch in batches for n in run(batch, beam)]


def hf_runner(model: Seq2SeqBase, steps: int, device: str = "cpu") -> Runner:
    """MarianMTModel at the same dimensions, random weights, generate() with a fixed length."""
    from transformers import MarianMTModel

    vocab = model.out_weight.size(0)
    config = hf_config("marian", model.cfg, vocab, vocab)  # the shape export-hf writes
    config.forced_eos_token_id = None  # generate() runs exactly `steps` tokens
    hf = MarianMTModel(config).eval().to(device)

    @per_batch
    def run(batch: Batch, beam: int) -> list[int]:
        src = collate_src(batch).to(device)  # (B, S), as ours is fed
        with torch.inference_mode():
            out = hf.generate(
                input_ids=src,
                attention_mask=src != PAD,
                num_beams=beam,
                do_sample=False,
                min_new_tokens=steps,
                max_new_tokens=steps,
                length_penalty=1.0,
            )
        return [out.size(1) - 1] * len(batch)  # minus the decoder start token

    return run


def ct2_runner(
    subject: Subject,
    steps: int,
    quantization: str,
    threads: int,
    tmp: Path,
    workers: int = 1,
    device: str = "cpu",
) -> Runner:
    """CTranslate2 on the same batches: one translate_batch call a batch; with `workers` > 1, one
    call for all, CTranslate2 batching them (sorted by length, `batch size` each) over that many
    inter_threads of threads / workers intra_threads, CTranslate2's own way to run batches at once."""
    import ctranslate2

    from pipeline.interop import ct2

    ct2.check_expressible(subject.model.cfg)
    assert isinstance(subject.model, Transformer)  # check_expressible refused the decoder-only model
    out = tmp / f"ct2-{quantization}"
    if not out.exists():
        spec = ct2.build_spec(subject.model, subject.src_pieces, subject.tgt_pieces)
        spec.validate()
        spec.optimize(quantization=quantization)
        out.mkdir()
        spec.save(str(out))
    translator = ctranslate2.Translator(
        str(out), device=device, intra_threads=max(threads // workers, 1), inter_threads=workers
    )

    def translate(batch: Batch, beam: int, batch_size: int) -> list[int]:
        pieces = [[subject.src_pieces[i] for i in src] for src in batch]
        results = translator.translate_batch(
            pieces,
            beam_size=beam,
            min_decoding_length=steps,
            max_decoding_length=steps,
            max_input_length=0,
            max_batch_size=batch_size,
        )
        return [len(r.hypotheses[0]) for r in results]

    if workers == 1:
        return per_batch(lambda batch, beam: translate(batch, beam, 0))
    return lambda batches, beam: translate([s for b in batches for s in b], beam, len(batches[0]))


# --- timing ------------------------------------------------------------------------


def check_lengths(run: Runner, batches: list[Batch], beam: int, steps: int) -> None:
    """A warm-up pass that also checks every output has exactly `steps` tokens."""
    lengths = run(batches, beam)
    if set(lengths) != {steps}:
        raise RuntimeError(f"expected {steps} output tokens per sentence, got {sorted(set(lengths))}")


def measure(
    systems: Mapping[tuple[str, str], Callable[[], Runner]],
    batches: list[Batch],
    steps: int,
    repeats: int,
    log: Callable[[str], None],
    seed: int = 1,
) -> list[dict]:
    """Rows {system, task, precision, metric, value} for every system and task.

    Every (system, task) is warmed up and checked first; then each of `repeats`
    rounds times one pass of each, in a shuffled order, and the median round
    counts. Interleaving keeps the ratios fair on a machine whose speed drifts.
    """
    n = sum(map(len, batches))
    runners = {key: make() for key, make in systems.items()}
    cells = [(key, task, beam) for key in runners for task, beam in TASKS.items()]
    for key, _, beam in cells:
        check_lengths(runners[key], batches, beam, steps)
    passes = {(key, task): functools.partial(runners[key], batches, beam) for key, task, beam in cells}
    seconds = shuffled_rounds(passes, repeats, random.Random(seed))
    rows = []
    for (system, precision), task, _ in cells:
        median = statistics.median(seconds[(system, precision), task])
        log(f"{system:20s} {precision:5s} {task:14s} {n / median:8.1f} sentences/s")
        for metric, value in (("sentences_per_s", n / median), ("tokens_per_s", n * steps / median)):
            rows.append(row(system, task, precision, metric, value, digits=2))
    return rows
