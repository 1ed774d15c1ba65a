"""Cross-attention heatmaps: where each target piece looked in the source, per decoder layer.

Each sentence is translated with the torch backend (the model's decode
settings, or the beam given), then its output is teacher-forced through the
model inside `model.recording_attention()`, which records every attention
call's weights (B, H, Lq, Lk). The decoder's cross-attention weights of layer
l, heads averaged or one head, are a (T, S) matrix whose rows sum to 1: row
t is the query that predicted target piece t (the last row predicts EOS),
column s is source piece s (the last column is the source EOS).

    paths = plot_cross_attention("data/model", ["Ein Hund läuft."], "reports/figures")

draws one PNG per sentence, one panel per layer, with matplotlib's Agg
canvas (no pyplot, so no global state and no figure left open). Shapes:
docs/shapes.md; here T counts the target pieces and EOS, S the source's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from pipeline.data.batching import collate_src
from pipeline.data.text import normalize
from pipeline.decoding.batches import evaluating
from pipeline.decoding.ensemble import Ensemble
from pipeline.decoding.overrides import API_NAMES, settings_with
from pipeline.decoding.translator import Translator
from pipeline.errors import UserError
from pipeline.files import atomic_path
from pipeline.model.transformer import Transformer
from pipeline.tokens import BOS, EOS

Layers = Literal["all"] | Sequence[int]  # "all", or 0-based decoder layer indices
Heads = str | int  # "mean", or one 0-based head index
CELL_INCHES = 0.32  # per source/target piece: room for an 8-point label
MAX_PANEL_INCHES = 9.0
DPI = 120


@dataclass
class CrossAttention:
    """One sentence's decoder cross-attention, ready to draw."""

    src_pieces: list[str]  # (S,) the source pieces, then EOS
    tgt_pieces: list[str]  # (T,) the output pieces, then EOS
    layers: list[int]  # decoder layer of each matrix
    matrices: list[np.ndarray]  # per layer (T, S), rows sum to 1


def _translator(model: Translator | str | Path) -> Translator:
    return model if isinstance(model, Translator) else Translator.from_dir(model, device="cpu")


def cross_attention(
    translator: Translator,
    sentence: str,
    *,
    layers: Layers = "all",
    heads: Heads = "mean",
    beam: int | None = None,
) -> CrossAttention:
    """Translate `sentence`, teacher-force the output, return the chosen layers' (T, S) weights."""
    model, vocab, s = translator.model, translator.vocab, translator.settings
    if isinstance(model, Ensemble):
        raise UserError(
            "an ensemble has attention weights per member, not one set to draw; draw them with one model "
            "(decode.ensemble: [])"
        )
    if not isinstance(model, Transformer):  # the decoder-only model has no cross-attention
        raise UserError(
            f"model.arch={model.cfg.arch} has no cross-attention to draw; heatmaps need encoder_decoder"
        )
    text = normalize(sentence)
    if not text:
        raise UserError("an empty sentence has no attention to draw; pick a non-blank one")
    src = vocab.encode_src([text])[0]
    # The translator's own search (its samples, when it samples), as `translate` would give it.
    settings = settings_with(s, API_NAMES, {"beam": beam, "sample": False} if beam else {})
    ((best, *_),) = translator.search_ids([src], settings)
    src_t = collate_src([src]).to(translator.device)  # (1, S), EOS appended
    tgt_in = torch.tensor([[BOS, *best.tokens]], device=translator.device)  # (1, T)
    with evaluating(model), model.recording_attention() as records:
        model(src_t, tgt_in)
    chosen = range(len(model.decoder)) if layers == "all" else list(layers)
    weights = [records[f"decoder.{i}.cross_attn"][0][0].float() for i in chosen]  # each (H, T, S)
    matrices = [(w.mean(0) if heads == "mean" else w[int(heads)]).cpu().numpy() for w in weights]
    return CrossAttention(
        src_pieces=vocab.src_pieces([*src, EOS]),
        tgt_pieces=vocab.tgt_pieces([*best.tokens, EOS]),
        layers=list(chosen),
        matrices=matrices,
    )


def draw(attention: CrossAttention, path: Path, title: str = "") -> Path:
    """One PNG: a panel per layer (target pieces down, source pieces across) and one colorbar."""
    T, S = len(attention.tgt_pieces), len(attention.src_pieces)
    n = len(attention.matrices)
    cell = min(CELL_INCHES, MAX_PANEL_INCHES / max(S, T))  # long sentences: smaller cells, bounded figure
    panel_w, panel_h = max(2.5, cell * S + 1.2), max(2.0, cell * T + 1.2)
    fig = Figure(figsize=(panel_w * n + 1.0, panel_h + 0.6), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, n, squeeze=False)[0]
    # One scale for all panels, so layers compare; its top is the largest weight, not 1,
    # so that diffuse attention still shows its structure.
    vmax = max(float(m.max()) for m in attention.matrices)
    image = None
    for ax, layer, matrix in zip(axes, attention.layers, attention.matrices):
        image = ax.imshow(matrix, cmap="viridis", vmin=0.0, vmax=vmax, aspect="equal")
        ax.set_title(f"layer {layer + 1}", fontsize=9)
        ax.set_xticks(range(S), attention.src_pieces, rotation=90, fontsize=8)
        ax.set_yticks(range(T), attention.tgt_pieces, fontsize=8)
        ax.tick_params(length=0)
        ax.set_xlabel("source", fontsize=8)
    axes[0].set_ylabel("output (each row predicts it)", fontsize=8)
    assert image is not None  # vmax above needs at least one matrix
    fig.colorbar(image, ax=list(axes), shrink=0.8, label="attention weight")
    if title:
        fig.suptitle(title, fontsize=9)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    return Path(path)


def plot_sentence(
    model: Translator | str | Path,
    sentence: str,
    path: str | Path,
    *,
    layers: Layers = "all",
    heads: Heads = "mean",
    beam: int | None = None,
) -> Path:
    """One sentence's heatmaps into the PNG file `path`."""
    attention = cross_attention(_translator(model), sentence, layers=layers, heads=heads, beam=beam)
    head = "heads averaged" if heads == "mean" else f"head {int(heads) + 1}"
    return draw(attention, Path(path), title=f"{_shorten(sentence)}  ({head})")


def plot_cross_attention(
    model: Translator | str | Path,
    sentences: Sequence[str],
    out_dir: str | Path,
    layers: Layers = "all",
    heads: Heads = "mean",
) -> list[Path]:
    """out_dir/cross_attention_{i}.png for each sentence i (from 0); returns the paths in order."""
    if isinstance(sentences, str):
        raise TypeError("sentences must be a list of strings; for one sentence and a file use plot_sentence")
    translator = _translator(model)  # loaded once for all sentences
    out_dir = Path(out_dir)
    return [
        plot_sentence(translator, s, out_dir / f"cross_attention_{i}.png", layers=layers, heads=heads)
        for i, s in enumerate(sentences)
    ]


def _shorten(text: str, limit: int = 90) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
