"""The report's figures, read as a reader sees them: titles, axis labels, legends, notes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pipeline.reporting import figures
from pipeline.stages.report import read_tsv
from tests.support.figures import axis_labels, legend_texts, notes, png_size


def test_plot_without_validation_rows(tmp_path: Path, saved_figures) -> None:
    steps = pd.DataFrame({"step": [10, 20, 30], "loss": [5.0, 4.0, 3.5], "lr": [1e-4, 2e-4, 3e-4]})
    figures.plot_learning_curves(steps, None, tmp_path / "none.png")
    (tmp_path / "valid.tsv").write_text("step\tepoch\tval_loss\tval_bleu\n")  # validation never ran
    header_only = read_tsv(tmp_path / "valid.tsv")
    figures.plot_learning_curves(steps, header_only, tmp_path / "empty.png")
    (tmp_path / "valid.tsv").write_text("step\tepoch\tval_loss\tval_bleu\n20\t1\t4.5\tnan\n")
    figures.plot_learning_curves(steps, read_tsv(tmp_path / "valid.tsv"), tmp_path / "no_bleu.png")
    for name in ("none.png", "empty.png", "no_bleu.png"):
        assert png_size(tmp_path / name)[0] > 1000
        _, bleu, lr = saved_figures[name].axes
        assert axis_labels(bleu) == ("Validation BLEU (greedy)", "update step", "BLEU")
        assert notes(bleu) == ["no data"] and not bleu.get_lines()
        assert axis_labels(lr)[2] == "learning rate ($\\times 10^{-4}$)" and notes(lr) == []
    assert legend_texts(saved_figures["none.png"].axes[0]) == ["train (label-smoothed)"]
    assert legend_texts(saved_figures["empty.png"].axes[0]) == ["train (label-smoothed)"]
    assert legend_texts(saved_figures["no_bleu.png"].axes[0]) == ["train (label-smoothed)", "val"]
