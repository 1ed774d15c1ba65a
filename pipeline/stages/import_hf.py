"""Command `import-hf`: an OPUS-MT / MarianMTModel directory as a model directory of ours
(docs/huggingface.md).

    python -m pipeline import-hf path/to/opus-mt-ru-en --out data/opus-mt-ru-en
    python -m pipeline import-hf Helsinki-NLP/opus-mt-ru-en --out data/opus-mt-ru-en   # online

The result translates (`translate --model`), decodes, exports to CTranslate2 and
Hugging Face like a trained model directory. Settings other than the model's come
from --params.
"""

from __future__ import annotations

from pathlib import Path

import click

from pipeline.interop.hf_import import import_hf
from pipeline.stages.options import load_params, out_dir_option, params_option


@click.command("import-hf")
@click.argument("source")
@out_dir_option("model")
@params_option
def command(source: str, out_dir: Path, params_file: Path) -> None:
    """Import SOURCE, a local OPUS-MT directory (or, online, a Hub name such as
    Helsinki-NLP/opus-mt-ru-en), as a model directory."""
    import_hf(source, out_dir, load_params(params_file))
    click.echo(f"wrote {out_dir}", err=True)
