"""Command `export-ct2`: a trained model directory as a CTranslate2 model (docs/ctranslate2.md).

    python -m pipeline export-ct2 --model data/model --out data/ct2 [--quantization int8]

`translate --backend ctranslate2` makes the same conversion on first use; this
command writes it where you choose, for serving elsewhere.
"""

from __future__ import annotations

from pathlib import Path

import click

from pipeline.decoding.translator import QUANTIZATIONS
from pipeline.interop.ct2 import export
from pipeline.stages.options import model_option, out_dir_option


@click.command("export-ct2")
@model_option
@out_dir_option("CTranslate2 model")
@click.option(
    "--quantization",
    type=click.Choice(QUANTIZATIONS),
    default="float32",
    show_default=True,
    help="Weight type of the exported model (int8: about 4x smaller, faster on CPU).",
)
def command(model_dir: Path, out_dir: Path, quantization: str) -> None:
    """Export a trained model to CTranslate2 (for `translate --backend ctranslate2`)."""
    export(model_dir, out_dir, quantization)
    click.echo(f"wrote {out_dir} ({quantization})", err=True)
