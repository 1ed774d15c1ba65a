"""The PNG a figure wrote, and what a reader sees on it."""

from __future__ import annotations

from pathlib import Path


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the IHDR chunk, after checking the PNG signature."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", f"{path} is not a PNG"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def axis_labels(ax) -> tuple[str, str, str]:
    """A matplotlib Axes' (title, x label, y label)."""
    return ax.get_title(), ax.get_xlabel(), ax.get_ylabel()


def legend_texts(ax) -> list[str]:
    """The entries of an Axes' legend, in order; [] without one."""
    legend = ax.get_legend()
    return [t.get_text() for t in legend.get_texts()] if legend is not None else []


def notes(ax) -> list[str]:
    """The texts written on an Axes' plot area (annotations, "no data"), in order."""
    return [t.get_text() for t in ax.texts]
