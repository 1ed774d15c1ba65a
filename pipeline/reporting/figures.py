"""The report's figures: learning curves, BLEU by source length, other runs' validation BLEU.

Each `plot_*` draws one PNG with matplotlib's Agg backend (files only: no
display on servers and in DVC runs), titled and labelled for a reader who sees
the picture alone.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib
import pandas as pd

matplotlib.use("Agg")
import matplotlib.pyplot as plt

DPI = 110


def plot_learning_curves(steps: pd.DataFrame | None, valid: pd.DataFrame | None, path: Path) -> None:
    """Three panels by update step: train and val loss; val BLEU; learning rate. PNG at `path`."""
    fig, (ax_loss, ax_bleu, ax_lr) = plt.subplots(1, 3, figsize=(12, 3.5))
    steps = None if steps is None or steps.empty else steps  # an empty log draws as no log
    valid = None if valid is None or valid.empty else valid
    has_steps, has_valid = steps is not None, valid is not None

    # The train loss is label-smoothed, the val loss is not: the gap is not overfitting.
    if steps is not None:
        ax_loss.plot(steps["step"], steps["loss"], label="train (label-smoothed)", linewidth=1.2)
    if valid is not None and valid["val_loss"].notna().any():
        ax_loss.plot(valid["step"], valid["val_loss"], "o-", label="val", markersize=3)
    _finish(ax_loss, "Loss", "cross-entropy per target token (nats)", has_steps or has_valid)
    if has_steps or has_valid:
        ax_loss.legend(frameon=False)

    bleu = valid if valid is not None and "val_bleu" in valid and valid["val_bleu"].notna().any() else None
    if bleu is not None:
        ax_bleu.plot(bleu["step"], bleu["val_bleu"], "o-", color="tab:green", markersize=3)
        best = bleu.loc[bleu["val_bleu"].idxmax()]
        ax_bleu.plot([best["step"]], [best["val_bleu"]], "*", color="black", markersize=10)
        ax_bleu.annotate(
            f"best {best['val_bleu']:.1f}",
            (best["step"], best["val_bleu"]),
            textcoords="offset points",
            xytext=(0, 7),
            ha="center",
            fontsize=8,
        )
        ax_bleu.margins(y=0.15)  # room for the label above the best point
    _finish(ax_bleu, "Validation BLEU (greedy)", "BLEU", bleu is not None)

    lr_label = "learning rate"
    if steps is not None:
        # Scaled into [1, 10): matplotlib's own offset text ("1e-3") lands on the title.
        scale = _power_of_ten(steps["lr"].max())
        ax_lr.plot(steps["step"], steps["lr"] / 10.0**scale, color="tab:orange", linewidth=1.2)
        lr_label += f" ($\\times 10^{{{scale}}}$)" if scale else ""
    _finish(ax_lr, "Learning rate", lr_label, has_steps)

    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def _power_of_ten(value: float) -> int:
    """The exponent that scales `value` into [1, 10) (0 for zero or NaN)."""
    if not value or math.isnan(value):
        return 0
    return math.floor(math.log10(abs(value)))


def plot_bleu_by_length(rows: list[dict[str, Any]], path: Path, test_set: str = "test") -> None:
    """Bar chart of BLEU per source-length bucket of `test_set`, each bar labelled with its BLEU and lines."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = [r["bucket"] for r in rows]
    values = [r["bleu"] if r["bleu"] is not None else 0.0 for r in rows]
    bars = ax.bar(labels, values, color="tab:blue")
    for bar, row in zip(bars, rows):
        text = f"{row['bleu']:.1f}\n{row['n_lines']:,} lines" if row["bleu"] is not None else "no lines"
        ax.annotate(
            text,
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            textcoords="offset points",
            xytext=(0, 2),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_xlabel("source length (words)")
    ax.set_ylabel("BLEU")
    ax.set_title(f"BLEU by source length: {test_set}")
    ax.set_ylim(0, max([*values, 1.0]) * 1.25)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def plot_experiment_curves(curves: list[tuple[str, pd.DataFrame]], current: str | None, path: Path) -> None:
    """Validation BLEU by update step, a line per (label, frame of step and value); `current` in black."""
    fig, ax = plt.subplots(figsize=(8, 4))
    for label, frame in curves:
        mine = label == current
        style = {"linewidth": 2.2, "color": "black", "zorder": 3} if mine else {"linewidth": 1.2}
        ax.plot(
            frame["step"],
            frame["value"],
            "o-",
            markersize=2.5,
            label=f"{label} (this run)" if mine else label,
            **style,
        )
    _finish(ax, "Validation BLEU (greedy): this run and the best others", "BLEU", bool(curves))
    if curves:
        ax.legend(frameon=False, fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def _finish(ax: Any, title: str, ylabel: str, has_data: bool) -> None:
    ax.set_title(title)
    ax.set_xlabel("update step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    if not has_data:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="gray")
