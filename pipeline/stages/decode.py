"""Stage decode: translate the clean val and test sources with the trained model.

Output (one directory, written atomically): {val,test}.hyp, the detokenized
1-best translations, line-aligned with clean/{split}.src (an empty source
line gives an empty hypothesis); with decode.n_best > 1 also {split}.nbest in
the translate command's `i ||| hypothesis ||| score` format; and stats.json:
the device and decoding settings, and per split sentences, seconds,
sentences_per_s, tokens_per_s (1-best output subwords, EOS included),
truncated (inputs longer than the model takes, see search.fit_to_model).

Decoding runs through the same Translator as `translate`, so the stage scores
exactly what a user of the model directory gets; the settings are the
`decode` section of params.yaml, not the ones saved in the model.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import click

from pipeline import files
from pipeline.decoding.search import SearchStats
from pipeline.decoding.translator import Translator, nbest_row, one_line
from pipeline.devices import DEVICES
from pipeline.errors import UserError
from pipeline.params import DecodeParams
from pipeline.stages.options import load_params, params_option

SPLITS = ("val", "test")


def read_sources(clean_dir: Path) -> dict[str, list[str]]:
    sources = {}
    for split in SPLITS:
        path = clean_dir / f"{split}.src"
        if not path.is_file():
            raise UserError(f"{path}: missing; run the clean stage first (`python -m pipeline clean`)")
        sources[split] = files.read_lines(path)
    return sources


def decode_split(
    translator: Translator, lines: list[str], n_best: int, out_dir: Path, split: str
) -> dict[str, Any]:
    """Write out_dir/{split}.hyp (and .nbest); return the split's speed and truncation stats."""
    stats = SearchStats()
    start = time.perf_counter()
    nbest = translator.translate_nbest(lines, n_best, stats=stats)
    seconds = time.perf_counter() - start
    hyps = [one_line(n[0].text) for n in nbest]
    assert len(hyps) == len(lines), f"{split}: {len(hyps)} hypotheses for {len(lines)} sources"
    files.write_lines(out_dir / f"{split}.hyp", hyps)
    if n_best > 1:
        rows = [nbest_row(i, t) for i, ts in enumerate(nbest) for t in ts]
        files.write_lines(out_dir / f"{split}.nbest", rows)
    return {
        "sentences": len(lines),
        "seconds": round(seconds, 3),
        "sentences_per_s": round(len(lines) / max(seconds, 1e-9), 2),
        "tokens_per_s": round(stats.out_tokens / max(seconds, 1e-9), 2),
        "truncated": stats.truncated,
    }


def decode(
    settings: DecodeParams, model_dir: Path, clean_dir: Path, out_dir: Path, device: str = "auto"
) -> dict[str, Any]:
    """Translate clean_dir/{val,test}.src with model_dir into out_dir (atomically); returns stats.json."""
    sources = read_sources(clean_dir)
    translator = Translator.from_dir(model_dir, device, settings=settings)
    report: dict[str, Any] = {"device": str(translator.device), "decode": dataclasses.asdict(settings)}
    with files.atomic_path(out_dir) as tmp:
        tmp.mkdir()
        for split, lines in sources.items():
            report[split] = decode_split(translator, lines, settings.n_best, tmp, split)
        files.write_json(tmp / "stats.json", report)
    return report


@click.command("decode")
@params_option
@click.option(
    "--model",
    "model_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="The train stage's model directory.",
)
@click.option(
    "--clean",
    "clean_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="The clean stage's output directory.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Where to write {val,test}.hyp and stats.json.",
)
@click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True)
def command(params_file: Path, model_dir: Path, clean_dir: Path, out_dir: Path, device: str) -> None:
    """Translate the val and test sources (stage decode)."""
    params = load_params(params_file)
    report = decode(params.decode, model_dir, clean_dir, out_dir, device)
    for split in SPLITS:
        s = report[split]
        click.echo(
            f"{split}: {s['sentences']} sentences in {s['seconds']} s "
            f"({s['sentences_per_s']} sentences/s, {s['tokens_per_s']} tokens/s), {s['truncated']} truncated",
            err=True,
        )
