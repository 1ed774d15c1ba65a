"""The clean stage's model score (pipeline/decoding/pair_scores.py): pairs scored a second.

    python -m bench.pair_score_speed --forward data/model --reverse R --src S --tgt T

On the first --pairs pairs: the forward model's cross-entropy, relative, and with --reverse the
dual score, each on one thread and on every core, in pairs a second and a second per core.
Writes reports/noise/speed.json, which `python -m pipeline noise report` quotes.
"""

from __future__ import annotations

import time
from pathlib import Path

import click
import torch

from pipeline import files
from pipeline.data.pool import cores
from pipeline.decoding.pair_scores import PairScorer
from pipeline.machine import machine_info


@click.command()
@click.option("--forward", type=click.Path(file_okay=False, exists=True, path_type=Path), required=True)
@click.option("--reverse", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None)
@click.option("--src", type=click.Path(dir_okay=False, exists=True, path_type=Path), required=True)
@click.option("--tgt", type=click.Path(dir_okay=False, exists=True, path_type=Path), required=True)
@click.option("--pairs", "n_pairs", type=click.IntRange(min=1), default=5000, show_default=True)
@click.option(
    "--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("reports/noise/speed.json")
)
def main(forward: Path, reverse: Path | None, src: Path, tgt: Path, n_pairs: int, out: Path) -> None:
    """Time the score rule's scorer on the first --pairs pairs; write OUT."""
    lines = [files.read_lines(path)[:n_pairs] for path in (src, tgt)]
    kinds: dict[str, tuple[Path | None, bool]] = {"cross-entropy": (None, False), "relative": (None, True)}
    if reverse is not None:
        kinds["dual, relative"] = (reverse, True)
    rows = []
    for threads in sorted({1, cores()}):
        torch.set_num_threads(threads)
        for kind, (back, relative) in kinds.items():
            scorer = PairScorer(forward, back, relative=relative)
            scorer(lines[0][:50], lines[1][:50])  # warm: allocations and kernels
            start = time.perf_counter()
            scorer(*lines)
            per_s = len(lines[0]) / (time.perf_counter() - start)
            rows.append({"score": kind, "threads": threads, "pairs_per_s": round(per_s, 1)})
            rows[-1]["per_core"] = round(per_s / threads, 1)
            click.echo(f"{kind:<16} {threads} thread(s): {per_s:8.1f} pairs/s", err=True)
    files.write_json(
        out, {"pairs": len(lines[0]), "machine": machine_info("threads", cores(), []), "rows": rows}
    )
    click.echo(f"wrote {out}")


if __name__ == "__main__":
    main()
