"""Command `export-hf`: a model directory as a Hugging Face transformers model (docs/huggingface.md).

    python -m pipeline export-hf --model data/model --out data/hf [--metrics reports/metrics.json]

AutoModelForSeq2SeqLM and AutoTokenizer load the result (MarianMTModel for post-LN,
PegasusForConditionalGeneration for pre-LN, the Marian tokenizer for both); its
README.md is a model card with the scores of reports/metrics.json.
"""

from __future__ import annotations

from pathlib import Path

import click

from pipeline.interop.hf_export import export_hf
from pipeline.stages.options import model_option, out_dir_option


@click.command("export-hf")
@model_option
@out_dir_option("transformers model")
@click.option(
    "--metrics",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The scores for the model card [default: metrics.json in the model directory, else "
    "reports/metrics.json of the repository holding it].",
)
def command(model_dir: Path, out_dir: Path, metrics: Path | None) -> None:
    """Export a model directory for transformers (AutoModelForSeq2SeqLM, the Hub)."""
    export_hf(model_dir, out_dir, metrics)
    click.echo(f"wrote {out_dir}", err=True)
