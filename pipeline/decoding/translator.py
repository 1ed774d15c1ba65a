"""Translate raw text with a model directory: the backends behind the `translate` command.

Raw lines are normalized as the training text was (pipeline.data.text.normalize),
encoded, searched and detokenized; a blank line gives an empty output without
running the model. `TextTranslator` is that for any backend; `Translator` is the
torch one, and pipeline/interop/ct2.py the CTranslate2 one. What a call may change of
the model's settings: pipeline/decoding/overrides.py. The command, its n-best format and the backends:
docs/translate.md; sampling: docs/sampling.md.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from pipeline.data.tags import split_tag, tag, tag_of, tags_in
from pipeline.data.text import normalize
from pipeline.data.vocab import Vocab
from pipeline.decoding.batches import default_workers
from pipeline.decoding.ensemble import Ensemble, load_members
from pipeline.decoding.overrides import API_NAMES, Overrides, settings_with
from pipeline.decoding.search import translate_ids
from pipeline.decoding.steps import Hypothesis, SearchModel, SearchStats
from pipeline.devices import torch_device
from pipeline.errors import UserError
from pipeline.model import checkpoint
from pipeline.params import DecodeParams, Params

if TYPE_CHECKING:  # annotations only (Python 3.10 has no typing.Unpack)
    from typing_extensions import Unpack

CHUNK_LINES = 5000  # lines searched together: enough to sort into full batches, bounded memory


@dataclass
class Translation:
    """One detokenized hypothesis and the length-normalized log-probability it was ranked by."""

    text: str
    score: float


class TextTranslator:
    """Raw lines in, detokenized lines out, for any backend: subclasses set `vocab` and `settings`
    and provide `search_ids` (source ids -> per input its n_best hypotheses, in input order)."""

    vocab: Vocab
    settings: DecodeParams
    params: Params  # the params the model was trained with

    def search_ids(
        self, seqs: Sequence[Sequence[int]], s: DecodeParams, stats: SearchStats | None = None
    ) -> list[list[Hypothesis]]:
        raise NotImplementedError

    def search(
        self,
        lines: Sequence[str],
        s: DecodeParams,
        stats: SearchStats | None = None,
        tgt_lang: str | None = None,
    ) -> list[list[Hypothesis]]:
        """Raw lines -> per line its hypotheses; a blank line gets an empty source (and output)."""
        texts = self.tagged([normalize(line) for line in lines], tgt_lang)
        # a blank line, or a tag alone, gets an empty source
        ids = [seq if split_tag(text)[1] else [] for text, seq in zip(texts, self.vocab.encode_src(texts))]
        return self.search_ids(ids, s, stats)

    @functools.cached_property
    def target_languages(self) -> list[str]:
        """The languages the model translates into: its tags' (several), or its one target."""
        found = tags_in(self.vocab.pieces("src"))
        return sorted(found) if found else [self.params.data.tgt_lang]

    def tagged(self, texts: list[str], tgt_lang: str | None) -> list[str]:
        """The lines each behind the tag of `tgt_lang` where the model has tags (lines that start with a
        tag keep theirs); a target the model lacks, or none where it has several, is refused."""
        langs = self.target_languages
        if tgt_lang is not None and tgt_lang not in langs:
            raise UserError(
                f"target language {tgt_lang!r}: this model translates into {', '.join(langs)} only; "
                "pick one of those"
            )
        if len(langs) == 1:
            return texts
        if tgt_lang is None:
            if all(tag_of(text) for text in texts if text):
                return texts
            raise UserError(
                f"this model translates into {', '.join(langs)}: say which (the target language: "
                f"translate --tgt-lang {langs[0]}, or tgt_lang= in Python and MLflow), or start each line "
                f"with its tag, {tag(langs[0])}"
            )
        return [text if not text or tag_of(text) else f"{tag(tgt_lang)} {text}" for text in texts]

    def translate(
        self,
        lines: Sequence[str],
        *,
        stats: SearchStats | None = None,
        tgt_lang: str | None = None,
        **overrides: Unpack[Overrides],
    ) -> list[str]:
        """One detokenized 1-best translation (or sample) per line; `overrides` change self.settings
        for this call (Overrides; `sample=True` without a beam samples with beam 1: settings_with).
        `tgt_lang`: the language to translate into, for a model of several (`target_languages`)."""
        settings = settings_with(self.settings, API_NAMES, {**overrides, "n_best": 1})
        found = self.search(lines, settings, stats, tgt_lang)
        return [self.vocab.decode_tgt(hyps[0].tokens) for hyps in found]

    def translate_nbest(
        self,
        lines: Sequence[str],
        n_best: int | None = None,
        *,
        stats: SearchStats | None = None,
        tgt_lang: str | None = None,
        **overrides: Unpack[Overrides],
    ) -> list[list[Translation]]:
        """Up to n_best (default: settings.n_best) translations per line, best first, with the
        scores the backend ranked them by; with sampling, n_best samples (they may repeat)."""
        settings = settings_with(self.settings, API_NAMES, {**overrides, "n_best": n_best})
        return [
            [Translation(self.vocab.decode_tgt(h.tokens), h.score) for h in hyps]
            for hyps in self.search(lines, settings, stats, tgt_lang)
        ]

    def translate_corpus(
        self,
        lines: Iterable[str],
        chunk_lines: int = CHUNK_LINES,
        stats: SearchStats | None = None,
        tgt_lang: str | None = None,
    ) -> Iterator[str]:
        """A corpus of any size, `chunk_lines` at a time with self.settings: one 1-best translation
        (or sample) per line, in order, in bounded memory, none holding a line break.

        Chunks change no output: a sentence's search ignores its batch, and its samples
        depend on the seed and the sentence alone (docs/sampling.md), so a corpus may also be
        cut into shards decoded apart.
        """
        it = iter(lines)
        while chunk := list(itertools.islice(it, chunk_lines)):
            yield from map(one_line, self.translate(chunk, stats=stats, tgt_lang=tgt_lang))


class Translator(TextTranslator):
    """The torch backend: a model (or an Ensemble of models of its vocabulary), its vocabulary and
    decoding settings.

    `workers`: batches decoded at once on CPU (batches.search_batches); by default
    batches.default_workers. Each uses a share of torch's threads, and a batch's
    products may round differently on fewer threads (docs/beam-search.md).
    """

    def __init__(
        self,
        model: SearchModel,
        vocab: Vocab,
        params: Params,
        settings: DecodeParams,
        device: torch.device,
        workers: int | None = None,
    ):
        self.model = model.to(device).eval()
        self.vocab = vocab
        self.params = params  # the params the model was trained with
        self.settings = settings
        self.device = device
        self.workers = default_workers(device) if workers is None else workers

    @classmethod
    def from_dir(
        cls,
        model_dir: str | Path,
        device: str = "auto",
        settings: DecodeParams | None = None,
        workers: int | None = None,
        ensemble: Sequence[str] | None = None,
        ensemble_name: str = "decode.ensemble",
    ) -> Translator:
        """Load model_dir's model.pt and sentencepiece model(s); settings default to its decode params.

        The model directories of `ensemble`, by default `settings.ensemble`, decode with it
        (load_members checks them; its messages call the list `ensemble_name`). A model's own saved
        settings name none: they never pull in other directories.
        """
        model_dir = Path(model_dir)
        path = model_dir / checkpoint.MODEL_FILE
        obj = checkpoint.load(path)
        model, params = checkpoint.restore_model(obj, path)
        vocab = Vocab.load(model_dir)
        sizes = {"source": (obj["src_vocab"], vocab.src_size), "target": (obj["tgt_vocab"], vocab.tgt_size)}
        for side, (model_size, spm_size) in sizes.items():
            if model_size != spm_size:
                raise UserError(
                    f"{model_dir}: the model's {side} vocabulary has {model_size} entries but its "
                    f"sentencepiece model has {spm_size}, so they come from different runs; copy in the "
                    "sentencepiece model(s) the model was trained with, or retrain"
                )
        settings = settings or dataclasses.replace(params.decode, ensemble=())
        if ensemble is not None:
            settings = dataclasses.replace(settings, ensemble=tuple(ensemble))
        if settings.ensemble:
            members = load_members(model_dir, vocab, params.model.arch, settings.ensemble, ensemble_name)
            return cls(Ensemble([model, *members]), vocab, params, settings, torch_device(device), workers)
        return cls(model, vocab, params, settings, torch_device(device), workers)

    def search_ids(
        self, seqs: Sequence[Sequence[int]], s: DecodeParams, stats: SearchStats | None = None
    ) -> list[list[Hypothesis]]:
        return translate_ids(self.model, seqs, s, device=self.device, stats=stats, workers=self.workers)


# CTranslate2's weight types (ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES), listed here so
# that the command's help does not need ctranslate2 installed.
QUANTIZATIONS = (
    "float32",
    "int8",
    "int8_float32",
    "int8_float16",
    "int8_bfloat16",
    "int16",
    "float16",
    "bfloat16",
)


# --- input and output --------------------------------------------------------------


def one_line(text: str) -> str:
    """Keep the output's line count: a hypothesis never holds a line break (belt and braces)."""
    return text.replace("\r", " ").replace("\n", " ")


def nbest_row(index: int, t: Translation) -> str:
    """The Moses/fairseq n-best format: `i ||| hypothesis ||| score`."""
    return f"{index} ||| {one_line(t.text)} ||| {t.score:.4f}"
