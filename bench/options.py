"""What the model benchmarks' commands share (train_speed, decode_speed): the options
that mean the same in each, and where a run writes unless told: reports/, never for a smoke run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

REPO = Path(__file__).resolve().parents[1]
BENCH_JSON, BENCH_MD = REPO / "reports" / "bench.json", REPO / "reports" / "bench.md"

F = TypeVar("F", bound=Callable[..., Any])

seed_option = click.option("--seed", type=int, default=1, show_default=True)
device_option = click.option(
    "--device",
    type=click.Choice(["cpu", "cuda"]),
    default="cpu",
    show_default=True,
    help="cuda: every system on the GPU (the GPU check), into report sections of its own.",
)


def check_device(device: str) -> None:
    """Refuse --device cuda where torch sees no GPU, before anything is measured or written."""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise click.UsageError(
            "--device cuda: torch sees no CUDA GPU here (torch.cuda.is_available() is False)"
        )


model_option = click.option(
    "--model",
    "model_dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="A trained model directory to decode with; default: random weights at params.yaml's dimensions.",
)

split_file_option = click.option(
    "--split-file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Source sentences (e.g. data/clean/test/multi30k-test_2016_flickr.src); default: random ids.",
)


def rows_option(name: str) -> Callable[[F], F]:
    """The file the run's rows are merged into (--out, or train_speed's --out-json)."""
    return click.option(
        name,
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Rows merged here  [default: reports/bench.json; with --smoke: not written]",
    )


def section_option(name: str, section: str) -> Callable[[F], F]:
    """The Markdown file whose `section` the run rewrites (--md, or train_speed's --out-md)."""
    return click.option(
        name,
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help=f"{section} written here  [default: reports/bench.md; with --smoke: not written]",
    )


def report_files(smoke: bool, rows: Path | None, md: Path | None) -> tuple[Path | None, Path | None]:
    """Where a run writes: the files given; for the others reports/bench.json and .md, unless a smoke run."""
    if smoke:
        return rows, md
    return rows or BENCH_JSON, md or BENCH_MD
