"""Cross-attention heatmaps: the matrices drawn are attention distributions; the PNGs are valid and name
their sentence, layers, head and pieces."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from pipeline.decoding.translator import Translator
from pipeline.errors import UserError
from pipeline.reporting import heatmaps
from tests.support.figures import png_size
from tests.support.models import make_model_dir

SENTENCES = ["ein hund läuft über die straße", "die katze"]


def test_matrices_are_distributions_over_the_source(translator: Translator) -> None:
    att = heatmaps.cross_attention(translator, SENTENCES[0])
    assert att.layers == [0, 1] and len(att.matrices) == 2
    assert att.src_pieces[-1] == att.tgt_pieces[-1] == "</s>"
    translation = translator.translate([SENTENCES[0]])[0]
    assert "".join(att.tgt_pieces[:-1]).replace("▁", " ").strip() == translation.strip()
    for m in att.matrices:
        assert m.shape == (len(att.tgt_pieces), len(att.src_pieces))
        np.testing.assert_allclose(m.sum(axis=1), 1.0, atol=1e-5)
        assert (m >= 0).all()


def test_heads_mean_is_the_average_of_the_single_heads(translator: Translator) -> None:
    mean = heatmaps.cross_attention(translator, SENTENCES[1], layers=[1]).matrices[0]
    single = [
        heatmaps.cross_attention(translator, SENTENCES[1], layers=[1], heads=h).matrices[0] for h in range(4)
    ]
    np.testing.assert_allclose(np.mean(single, axis=0), mean, atol=1e-6)
    assert not np.allclose(single[0], single[1]), "heads should differ"


def test_plot_writes_one_png_per_sentence_sized_to_its_panels(translator: Translator, tmp_path: Path) -> None:
    paths = heatmaps.plot_cross_attention(translator, SENTENCES, tmp_path / "figs")
    assert [p.name for p in paths] == ["cross_attention_0.png", "cross_attention_1.png"]
    sizes = [png_size(p) for p in paths]
    assert all(w > 200 and h > 150 for w, h in sizes)
    assert sizes[0][0] > sizes[1][0], "the longer source gets wider panels"
    one_layer = heatmaps.plot_sentence(translator, SENTENCES[0], tmp_path / "one.png", layers=[0], heads=2)
    assert png_size(one_layer)[0] < sizes[0][0], "one panel instead of two"
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == [p.name for p in paths]  # no temporaries


def test_figure_names_the_sentence_layers_head_and_pieces(
    translator: Translator, tmp_path: Path, saved_figures
) -> None:
    heatmaps.plot_cross_attention(translator, SENTENCES, tmp_path / "figs")
    attention = heatmaps.cross_attention(translator, SENTENCES[0])
    figure = saved_figures["cross_attention_0.png"]
    *panels, colorbar = figure.axes
    assert figure.get_suptitle() == "ein hund läuft über die straße  (heads averaged)"
    assert [p.get_title() for p in panels] == ["layer 1", "layer 2"]
    assert [p.get_xlabel() for p in panels] == ["source", "source"]
    assert [p.get_ylabel() for p in panels] == ["output (each row predicts it)", ""]  # shared, on the left
    for panel in panels:
        assert [t.get_text() for t in panel.get_xticklabels()] == attention.src_pieces
        assert [t.get_text() for t in panel.get_yticklabels()] == attention.tgt_pieces
    assert colorbar.get_ylabel() == "attention weight"

    heatmaps.plot_sentence(translator, SENTENCES[1], tmp_path / "one.png", layers=[1], heads=2)
    one = saved_figures["one.png"]
    assert one.get_suptitle() == "die katze  (head 3)"  # heads counted from 1, as layers are
    assert [a.get_title() for a in one.axes[:-1]] == ["layer 2"]
    long = " ".join(["hund"] * 30)  # 149 characters: the title keeps the first 89 and an ellipsis
    heatmaps.plot_sentence(translator, long, tmp_path / "long.png", layers=[0])
    assert saved_figures["long.png"].get_suptitle() == f"{long[:89]}…  (heads averaged)"


def test_model_dir_and_refusals(tmp_path: Path) -> None:
    model_dir = make_model_dir(tmp_path / "model")
    (path,) = heatmaps.plot_cross_attention(model_dir, ["der mann"], tmp_path / "out")
    png_size(path)
    with pytest.raises(UserError, match="empty sentence"):
        heatmaps.plot_cross_attention(model_dir, ["  "], tmp_path / "out")
    with pytest.raises(TypeError, match="plot_sentence"):
        heatmaps.plot_cross_attention(model_dir, "der mann", tmp_path / "out")
    decoder_only = Translator.from_dir(make_model_dir(tmp_path / "dec", arch="decoder_only"), device="cpu")
    with pytest.raises(UserError, match="no cross-attention"):
        heatmaps.cross_attention(decoder_only, "der mann")
    ensemble = Translator.from_dir(
        model_dir, device="cpu", ensemble=[str(make_model_dir(tmp_path / "b", seed=1))]
    )
    with pytest.raises(UserError, match="an ensemble has attention weights per member"):
        heatmaps.cross_attention(ensemble, "der mann")


def test_a_sampling_translator_draws_the_sample_it_translates(translator: Translator) -> None:
    settings = dataclasses.replace(
        translator.settings,
        beam=1,
        sampling=dataclasses.replace(translator.settings.sampling, enabled=True, temperature=1.5, seed=2),
    )
    sampler = Translator(translator.model, translator.vocab, translator.params, settings, translator.device)
    att = heatmaps.cross_attention(sampler, SENTENCES[0])
    sampled = sampler.translate([SENTENCES[0]])[0]
    assert "".join(att.tgt_pieces[:-1]).replace("▁", " ").strip() == sampled.strip()
    searched = heatmaps.cross_attention(sampler, SENTENCES[0], beam=3)  # a beam given: beam search
    assert searched.tgt_pieces == heatmaps.cross_attention(translator, SENTENCES[0], beam=3).tgt_pieces
