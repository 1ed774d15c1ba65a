"""Stage-less command `translate`: raw text in, translations out, with a model directory.

    python -m pipeline translate --model data/model < input.de > output.en

Input is raw text, one sentence a line. Every input line gives exactly one output
line (with --n-best K, up to K lines in the Moses/fairseq n-best format `i |||
hypothesis ||| score`, best first); a blank line gives an empty one without
running the model. Bytes that are not UTF-8 become U+FFFD, counted once on stderr;
output is always UTF-8. When stdin is a terminal it prompts and answers each line.

--backend torch runs pipeline.decoding.translator.Translator; ctranslate2 runs a
CTranslate2 conversion of the same model (pipeline/interop/ct2.py, the optional
`ct2` extra), made on first use. --sample draws instead of searching (torch only).
More: docs/translate.md, docs/ctranslate2.md, docs/sampling.md.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import click

from pipeline import lineage
from pipeline.decoding.overrides import FIELDS, SAMPLE, SETTINGS, settings_with
from pipeline.decoding.translator import (
    CHUNK_LINES,
    QUANTIZATIONS,
    TextTranslator,
    Translator,
    nbest_row,
    one_line,
)
from pipeline.devices import DEVICES
from pipeline.errors import UserError
from pipeline.files import atomic_path
from pipeline.interop import ct2
from pipeline.params import DecodeParams
from pipeline.stages.options import model_option

Members = tuple[str, ...]  # --ensemble: other model directories


def load_torch(
    model_dir: Path, device: str, quantization: str | None, exact: bool = True, ensemble: Members = ()
) -> TextTranslator:
    """The reference search itself: `exact` changes nothing."""
    if quantization not in (None, "float32"):
        raise UserError(
            f"--quantization {quantization} needs --backend ctranslate2; the torch backend runs float32"
        )
    return Translator.from_dir(model_dir, device, ensemble=ensemble, ensemble_name="--ensemble")


def load_ctranslate2(
    model_dir: Path,
    device: str,
    quantization: str | None,
    exact: bool = False,
    ensemble: Members = (),
) -> TextTranslator:
    if ensemble:
        raise UserError("--ensemble: the ctranslate2 backend decodes one model; use --backend torch")
    return ct2.CT2Translator.from_dir(model_dir, device, quantization, exact=exact)


OPTIONS = {name: "--" + name.replace("_", "-") for name in FIELDS}  # settings_with's names, as options


def saved_settings(model_dir: Path) -> DecodeParams | None:
    """The decode settings in the model directory's params.yaml, read without its weights; None where
    they cannot be read (loading the model then says why)."""
    try:
        return lineage.read(str(model_dir), "--model")[1].decode
    except UserError:
        return None


def decode_options(command: Callable[..., None]) -> Callable[..., None]:
    """An option for each setting a call may override (overrides.SETTINGS), defaulting to the
    model's own; their values are checked together by settings_with, which names the option."""
    for s in reversed(SETTINGS):
        default = f"  [default: the model's decode.{s.key}]"
        if s.kind is bool:
            option = click.option(OPTIONS[s.name], is_flag=True, help=s.spec.help + default)
        else:
            option = click.option(OPTIONS[s.name], type=s.kind, default=None, help=s.spec.help + default)
        command = option(command)
    return command


# (model_dir, device, quantization or None, exact search, ensemble members) -> a backend
BACKENDS: dict[str, Callable[[Path, str, str | None, bool, Members], TextTranslator]] = {
    "torch": load_torch,
    "ctranslate2": load_ctranslate2,
}


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


Render = Callable[[list[str], int], list[str]]  # input lines, number of the first -> output lines


def renderer(
    translator: TextTranslator,
    n_best: int,
    beam: int | None,
    batch_tokens: int | None,
    tgt_lang: str | None = None,
) -> Render:
    """Output lines for a chunk of input: plain translations, or `i ||| hyp ||| score` rows."""

    def plain(lines: list[str], first: int) -> list[str]:
        found = translator.translate(lines, beam=beam, batch_tokens=batch_tokens, tgt_lang=tgt_lang)
        return [one_line(t) for t in found]

    def nbest(lines: list[str], first: int) -> list[str]:
        lists = translator.translate_nbest(
            lines, n_best, beam=beam, batch_tokens=batch_tokens, tgt_lang=tgt_lang
        )
        return [nbest_row(first + i, t) for i, ts in enumerate(lists) for t in ts]

    return plain if n_best == 1 else nbest


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
@model_option
@decode_options
@click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True)
@click.option(
    "--n-best",
    "n_best",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="K > 1 writes up to K lines per input as `i ||| hypothesis ||| score` (sampling: K samples).",
)
@click.option(
    "--input",
    "input_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Read from this file instead of stdin.",
)
@click.option(
    "--output",
    "output_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write here (atomically) instead of stdout.",
)
@click.option(
    "--backend",
    type=click.Choice(sorted(BACKENDS)),
    default="torch",
    show_default=True,
    help="torch, or ctranslate2 (converts the model on first use; needs the ct2 extra).",
)
@click.option(
    "--quantization",
    type=click.Choice(QUANTIZATIONS),
    default=None,
    help="ctranslate2 weight type, e.g. int8.  [default: float32, or what --model was exported with]",
)
@click.option(
    "--exact-search",
    is_flag=True,
    help="ctranslate2: reproduce the torch decoder's search and scores exactly (slower) "
    "instead of CTranslate2's own.",
)
@click.option(
    "--tgt-lang",
    default=None,
    help="The language to translate into, for a model of several target languages (it adds the tag, "
    "<2xx>, to lines without one).  [default: the model's one target]",
)
@click.option(
    "--ensemble",
    "ensemble",
    multiple=True,
    type=click.Path(file_okay=False, exists=True),
    help="Another model directory of the same vocabulary to decode with --model, their probabilities "
    "averaged; repeat for more (torch backend).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="torch on CPU (ignored on CUDA): batches decoded at once, sharing torch's threads.  "
    "[default: 2 with at least 2 threads, else 1]",
)
def command(
    model_dir: Path,
    device: str,
    n_best: int,
    input_file: Path | None,
    output_file: Path | None,
    backend: str,
    quantization: str | None,
    exact_search: bool,
    tgt_lang: str | None,
    ensemble: tuple[str, ...],
    workers: int | None,
    **decode: Any,
) -> None:
    """Translate raw text, one sentence a line (interactive when stdin is a terminal)."""
    if workers is not None and backend != "torch":
        raise UserError(
            f"--workers applies to the torch backend; {backend} runs its own threads: "
            "drop --workers, or use --backend torch"
        )
    if decode[SAMPLE] and backend != "torch":  # before a conversion; a model's own sampling is refused by ct2
        raise UserError(f"--sample: {backend} does not sample here ({ct2.NO_SAMPLING}); use --backend torch")
    # A message names the option, or the model's decode key it defaults to; checked against the saved
    # settings before the model is loaded (or converted), and against the loaded ones before any input.
    given = {name: value or None if isinstance(value, bool) else value for name, value in decode.items()}
    given["n_best"] = n_best
    if (saved := saved_settings(model_dir)) is not None:
        settings_with(saved, OPTIONS, given)
    translator = BACKENDS[backend](model_dir, device, quantization, exact_search, ensemble)
    if workers is not None:
        assert isinstance(translator, Translator)  # --workers was refused above for other backends
        translator.workers = workers
    translator.settings = settings_with(translator.settings, OPTIONS, given)
    if tgt_lang is not None:
        translator.tagged([], tgt_lang)  # a language the model lacks: refused before any input is read
    render = renderer(translator, n_best, None, None, tgt_lang)
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
