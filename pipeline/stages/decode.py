"""Stage decode: translate the clean val set and every clean test set with the trained model.

Output (one directory, written atomically): val.hyp and test/<name>.hyp, one
per clean/test/<name>.src, the detokenized 1-best translations, line-aligned
with their sources (an empty source line gives an empty hypothesis); with
decode.n_best > 1 also .nbest files in the translate command's
`i ||| hypothesis ||| score` format; and stats.json: the device and decoding
settings (and with decode.ensemble, "ensemble": each member's path and the sha256 of its
weights), "val" and "test": {"<name>": ...}, each with sentences, seconds,
sentences_per_s, tokens_per_s (1-best output subwords, EOS included) and
truncated (inputs longer than the model takes, see batches.fit_to_model).

Decoding runs through the same Translator as `translate`, so the stage scores
exactly what a user of the model directory gets; the settings are the
`decode` section of params.yaml, not the ones saved in the model.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click

from pipeline import lineage
from pipeline.decoding.sets import TEST_DIR, VAL, decode_sets, read_sources
from pipeline.decoding.translator import Translator
from pipeline.devices import DEVICES
from pipeline.params import DecodeParams
from pipeline.stages.options import clean_option, directory, load_params, model_option, params_option


def decode(
    settings: DecodeParams, model_dir: Path, clean_dir: Path, out_dir: Path, device: str = "auto"
) -> dict[str, Any]:
    """Translate clean_dir's val.src and test/*.src with model_dir into out_dir (atomically); returns
    stats.json."""
    sources = read_sources(clean_dir)
    translator = Translator.from_dir(model_dir, device, settings=settings)
    report: dict[str, Any] = {"device": str(translator.device), "decode": dataclasses.asdict(settings)}
    if settings.ensemble:  # DVC tracks the paths (params), not the weights: record which these were
        report["ensemble"] = [
            {"path": path, "model_sha256": lineage.sha256(Path(path) / lineage.MODEL_FILE)}
            for path in settings.ensemble
        ]
    return decode_sets(translator, sources, settings.n_best, out_dir, report)


def stats_lines(report: dict[str, Any]) -> list[str]:
    """One line per set: val, then each test set."""
    sets = [(VAL, report[VAL]), *((f"{TEST_DIR}/{n}", s) for n, s in report[TEST_DIR].items())]
    return [
        f"{name}: {s['sentences']} sentences in {s['seconds']} s "
        f"({s['sentences_per_s']} sentences/s, {s['tokens_per_s']} tokens/s), {s['truncated']} truncated"
        for name, s in sets
    ]


@click.command("decode")
@params_option
@model_option
@clean_option
@directory(
    "out",
    required=True,
    help="Where to write val.hyp, test/<name>.hyp and stats.json.",
)
@click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True)
def command(params_file: Path, model_dir: Path, clean_dir: Path, out_dir: Path, device: str) -> None:
    """Translate the val source and every test set's (stage decode)."""
    params = load_params(params_file)
    report = decode(params.decode, model_dir, clean_dir, out_dir, device)
    for line in stats_lines(report):
        click.echo(line, err=True)
