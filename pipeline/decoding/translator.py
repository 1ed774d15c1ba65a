"""Translate raw text with a model directory: the Translator, and the `translate` command.

    python -m pipeline translate --model data/model < input.de > output.en

Input is raw text, one sentence a line; it is normalized as the training text
was (clean.normalize), encoded, searched (pipeline/search.py) and
detokenized. Every input line gives exactly one output line (with --n-best K,
up to K lines, see below); a blank or whitespace-only line gives an empty
one without running the model. When stdin is a terminal (and no --input is
given), it prompts on stderr and answers each line as it is entered.

Input bytes are read as binary and decoded line by line as UTF-8; bytes that
are not UTF-8 become U+FFFD, and the number of lines that had any is reported
once on stderr at the end. Output is always UTF-8, whatever the locale.

With --n-best K the output is in the Moses/fairseq n-best format,
`i ||| hypothesis ||| score`, i the 0-based input line, score what the
search ranked by (the GNMT-normalized log-probability; CTranslate2's own
search reports its sum / length^alpha); up to K lines per
input, best first (a blank line, or a search space smaller than K, gives
fewer, but always at least one).

Backends: --backend names how the model runs. "torch" is the Translator
here; "ctranslate2" (pipeline/ct2.py, the optional `ct2` extra) runs a
CTranslate2 conversion of the same model, made on first use beside the model
directory (or an export-ct2 directory given as --model), with weights in
--quantization (float32 by default; int8 is faster on CPU). A backend is a
loader in BACKENDS returning a TextTranslator.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, Sequence

import click
import torch

from pipeline import checkpoint
from pipeline.clean import normalize
from pipeline.errors import UserError
from pipeline.files import atomic_path
from pipeline.model import Seq2SeqBase
from pipeline.params import DecodeParams, Params
from pipeline.search import Hypothesis, SearchStats, default_workers, translate_ids
from pipeline.vocab import Vocab

DEVICES = ("auto", "cpu", "cuda")
CHUNK_LINES = 5000  # lines searched together: enough to sort into full batches, bounded memory


@dataclass
class Translation:
    """One detokenized hypothesis and the length-normalized log-probability it was ranked by."""

    text: str
    score: float


def resolve_device(name: str) -> torch.device:
    """auto -> cuda when available, else cpu; refuses cuda on a machine without it."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("device cuda: no CUDA device is available here; use --device cpu (or auto)")
    return torch.device(name)


def check_settings(s: DecodeParams) -> None:
    """Refuse settings a caller can get wrong (params.yaml's are validated when loaded)."""
    if s.beam < 1 or s.batch_tokens < 1:
        raise UserError(f"beam ({s.beam}) and batch tokens ({s.batch_tokens}) must be at least 1")
    if not 1 <= s.n_best <= s.beam:
        raise UserError(
            f"n-best {s.n_best} must be within [1, beam={s.beam}]; raise the beam or lower n-best"
        )
    if s.length_penalty < 0:
        raise UserError(f"length penalty {s.length_penalty} must be non-negative")


class TextTranslator:
    """Raw lines in, detokenized lines out, for any backend: subclasses set `vocab` and `settings`
    and provide `search_ids` (source ids -> per input its n_best hypotheses, in input order)."""

    vocab: Vocab
    settings: DecodeParams

    def search_ids(
        self, seqs: Sequence[Sequence[int]], s: DecodeParams, stats: SearchStats | None = None
    ) -> list[list[Hypothesis]]:
        raise NotImplementedError

    def search(
        self, lines: Sequence[str], s: DecodeParams, stats: SearchStats | None = None
    ) -> list[list[Hypothesis]]:
        """Raw lines -> per line its hypotheses; a blank line gets an empty source (and output)."""
        texts = [normalize(line) for line in lines]
        ids = [seq if text else [] for text, seq in zip(texts, self.vocab.encode_src(texts))]
        return self.search_ids(ids, s, stats)

    def translate(
        self,
        lines: Sequence[str],
        *,
        beam: int | None = None,
        length_penalty: float | None = None,
        batch_tokens: int | None = None,
        stats: SearchStats | None = None,
    ) -> list[str]:
        """One detokenized 1-best translation per line; None settings come from self.settings."""
        settings = self._settings(beam, length_penalty, batch_tokens, n_best=1)
        return [self.vocab.decode_tgt(hyps[0].tokens) for hyps in self.search(lines, settings, stats)]

    def translate_nbest(
        self,
        lines: Sequence[str],
        n_best: int | None = None,
        *,
        beam: int | None = None,
        length_penalty: float | None = None,
        batch_tokens: int | None = None,
        stats: SearchStats | None = None,
    ) -> list[list[Translation]]:
        """Up to n_best (default: settings.n_best) translations per line, best first, with the
        scores the backend ranked them by."""
        settings = self._settings(beam, length_penalty, batch_tokens, n_best=n_best or self.settings.n_best)
        return [
            [Translation(self.vocab.decode_tgt(h.tokens), h.score) for h in hyps]
            for hyps in self.search(lines, settings, stats)
        ]

    def _settings(
        self, beam: int | None, length_penalty: float | None, batch_tokens: int | None, n_best: int
    ) -> DecodeParams:
        s = self.settings
        settings = dataclasses.replace(
            s,
            beam=s.beam if beam is None else beam,
            length_penalty=s.length_penalty if length_penalty is None else length_penalty,
            batch_tokens=s.batch_tokens if batch_tokens is None else batch_tokens,
            n_best=n_best,
        )
        check_settings(settings)
        return settings


class Translator(TextTranslator):
    """The torch backend: a model, its vocabulary and decoding settings.

    `workers`: batches decoded at once on CPU (search.search_batches); by default
    search.default_workers. Each uses a share of torch's threads, and a batch's
    products may round differently on fewer threads (the test set's outputs were
    identical with 1 and 2 workers).
    """

    def __init__(
        self, model: Seq2SeqBase, vocab: Vocab, params: Params, settings: DecodeParams, device: torch.device,
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
        cls, model_dir: str | Path, device: str = "auto", settings: DecodeParams | None = None,
        workers: int | None = None,
    ) -> "Translator":
        """Load model_dir's model.pt and sentencepiece model(s); settings default to its decode params."""
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
        return cls(model, vocab, params, settings or params.decode, resolve_device(device), workers)

    def search_ids(
        self, seqs: Sequence[Sequence[int]], s: DecodeParams, stats: SearchStats | None = None
    ) -> list[list[Hypothesis]]:
        return translate_ids(
            self.model, seqs, beam=s.beam, length_penalty=s.length_penalty, max_len_a=s.max_len_a,
            max_len_b=s.max_len_b, batch_tokens=s.batch_tokens, device=self.device, n_best=s.n_best,
            stats=stats, workers=self.workers,
        )


def load_torch(model_dir: Path, device: str, quantization: str | None, exact: bool = True) -> TextTranslator:
    """The reference search itself: `exact` changes nothing."""
    if quantization not in (None, "float32"):
        raise UserError(
            f"--quantization {quantization} needs --backend ctranslate2; the torch backend runs float32"
        )
    return Translator.from_dir(model_dir, device)


def load_ctranslate2(
    model_dir: Path, device: str, quantization: str | None, exact: bool = False
) -> TextTranslator:
    from pipeline import ct2  # imported on use: ctranslate2 is an optional extra

    return ct2.CT2Translator.from_dir(model_dir, device, quantization, exact=exact)


# (model_dir, device, quantization or None, exact search) -> a backend
BACKENDS: dict[str, Callable[[Path, str, str | None, bool], TextTranslator]] = {
    "torch": load_torch,
    "ctranslate2": load_ctranslate2,
}
# CTranslate2's weight types (ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES), listed here so
# that the command's help does not need ctranslate2 installed.
QUANTIZATIONS = (
    "float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16",
)


# --- input and output --------------------------------------------------------------


class Utf8Lines:
    """A binary stream's lines decoded as UTF-8; bad bytes replaced, the lines that had them counted."""

    def __init__(self, stream: BinaryIO):
        self.stream = stream
        self.invalid = 0

    def decode(self, raw: bytes) -> str:
        raw = raw[:-1] if raw.endswith(b"\n") else raw
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.invalid += 1
            return raw.decode("utf-8", errors="replace")

    def __iter__(self) -> Iterator[str]:
        # readline, not iteration over a read-ahead buffer, so a terminal gets each line at once
        for raw in iter(self.stream.readline, b""):
            yield self.decode(raw)


def one_line(text: str) -> str:
    """Keep the output's line count: a hypothesis never holds a line break (belt and braces)."""
    return text.replace("\r", " ").replace("\n", " ")


Render = Callable[[list[str], int], list[str]]  # input lines, number of the first -> output lines


def renderer(translator: TextTranslator, n_best: int, beam: int | None, batch_tokens: int | None) -> Render:
    """Output lines for a chunk of input: plain translations, or `i ||| hyp ||| score` rows."""

    def plain(lines: list[str], first: int) -> list[str]:
        return [one_line(t) for t in translator.translate(lines, beam=beam, batch_tokens=batch_tokens)]

    def nbest(lines: list[str], first: int) -> list[str]:
        lists = translator.translate_nbest(lines, n_best, beam=beam, batch_tokens=batch_tokens)
        return [nbest_row(first + i, t) for i, ts in enumerate(lists) for t in ts]

    return plain if n_best == 1 else nbest


def nbest_row(index: int, t: Translation) -> str:
    """The Moses/fairseq n-best format: `i ||| hypothesis ||| score`."""
    return f"{index} ||| {one_line(t.text)} ||| {t.score:.4f}"


def chunks(items: Iterable[str], size: int) -> Iterator[list[str]]:
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def run_batch(render: Render, lines: Iterable[str], out: BinaryIO) -> None:
    """Translate everything, CHUNK_LINES at a time (sorted into batches within a chunk)."""
    first = 0
    for chunk in chunks(lines, CHUNK_LINES):
        out.write(b"".join(line.encode("utf-8") + b"\n" for line in render(chunk, first)))
        first += len(chunk)


def run_interactive(render: Render, lines: Iterable[str], out: BinaryIO) -> None:
    """Prompt on stderr, translate each line as it is entered."""
    click.echo("Type a sentence and press Enter; Ctrl-D ends.", err=True)
    click.echo("> ", nl=False, err=True)
    for i, line in enumerate(lines):
        out.write(b"".join(output.encode("utf-8") + b"\n" for output in render([line], i)))
        out.flush()
        click.echo("> ", nl=False, err=True)
    click.echo("", err=True)


def translate_stream(render: Render, source: BinaryIO, out: BinaryIO, *, interactive: bool) -> int:
    """Translate `source` into `out`; returns how many input lines were not valid UTF-8."""
    lines = Utf8Lines(source)
    (run_interactive if interactive else run_batch)(render, lines, out)
    return lines.invalid


@click.command("translate")
@click.option("--model", "model_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="A model directory: the train stage's output (data/model).")
@click.option("--beam", type=click.IntRange(min=1), default=None,
              help="Beam size (1: greedy).  [default: the model's decode.beam]")
@click.option("--batch-tokens", type=click.IntRange(min=1), default=None,
              help="Sentences x beam x padded source length per batch.  [default: the model's setting]")
@click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True)
@click.option("--n-best", "n_best", type=click.IntRange(min=1), default=1, show_default=True,
              help="K > 1 writes up to K lines per input as `i ||| hypothesis ||| score`.")
@click.option("--input", "input_file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              default=None, help="Read from this file instead of stdin.")
@click.option("--output", "output_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write here (atomically) instead of stdout.")
@click.option("--backend", type=click.Choice(sorted(BACKENDS)), default="torch", show_default=True,
              help="torch, or ctranslate2 (converts the model on first use; needs the ct2 extra).")
@click.option("--quantization", type=click.Choice(QUANTIZATIONS), default=None,
              help="ctranslate2 weight type, e.g. int8.  "
              "[default: float32, or what --model was exported with]")
@click.option("--exact-search", is_flag=True,
              help="ctranslate2: reproduce the torch decoder's search and scores exactly (slower) "
              "instead of CTranslate2's own.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="torch on CPU (ignored on CUDA): batches decoded at once, sharing torch's threads.  "
              "[default: 2 with at least 2 threads, else 1]")
def command(
    model_dir: Path, beam: int | None, batch_tokens: int | None, device: str, n_best: int,
    input_file: Path | None, output_file: Path | None, backend: str, quantization: str | None,
    exact_search: bool, workers: int | None,
) -> None:
    """Translate raw text, one sentence a line (interactive when stdin is a terminal)."""
    if workers is not None and backend != "torch":
        raise UserError(f"--workers applies to the torch backend; {backend} runs its own threads: "
                        "drop --workers, or use --backend torch")
    translator = BACKENDS[backend](model_dir, device, quantization, exact_search)
    if workers is not None:
        translator.workers = workers
    s = translator.settings
    check_settings(dataclasses.replace(s, beam=beam or s.beam, n_best=n_best))  # before reading any input
    render = renderer(translator, n_best, beam, batch_tokens)
    stdin = sys.stdin.buffer  # bytes: the UTF-8 policy is ours, not the locale's
    interactive = input_file is None and stdin.isatty()
    with open(input_file, "rb") if input_file else contextlib.nullcontext(stdin) as source:
        if output_file is None:
            invalid = translate_stream(render, source, sys.stdout.buffer, interactive=interactive)
        else:
            with atomic_path(output_file) as tmp, open(tmp, "wb") as out:
                invalid = translate_stream(render, source, out, interactive=interactive)
    if invalid:
        click.echo(
            f"warning: {invalid} input line(s) were not valid UTF-8; their bad bytes were replaced by U+FFFD",
            err=True,
        )
