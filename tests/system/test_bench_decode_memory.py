"""bench/decode_memory.py on a tiny model: one row per batch, the shapes oneDNN meets counted."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from bench import decode_memory
from pipeline.model import linear
from tests.support.models import make_model_dir

SENTENCES = ["der hund läuft", "ein kind spielt", "die katze springt", "zwei männer", "eine frau", "ein ball"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("memory") / "model")


def test_one_row_per_batch_of_new_sentences(model_dir: Path) -> None:
    rows = decode_memory.measure(model_dir, SENTENCES, batches=3, lines=2)
    assert [r[0] for r in rows] == [1, 2, 3]
    assert all(rss > 0 and trimmed > 0 for _, rss, trimmed, _ in rows)
    shapes = [r[3] for r in rows]
    assert shapes == sorted(shapes)  # shapes met so far: never fewer


@pytest.mark.skipif(not linear.onednn_enabled(), reason="no oneDNN in this torch, or PIPELINE_CPU_GEMM=mkl")
def test_the_shapes_of_onednn_products_are_recorded_and_the_hook_removed() -> None:
    weight = torch.nn.Parameter(torch.randn(1024, 256))
    with decode_memory.product_shapes() as shapes, torch.inference_mode():
        for rows in (64, 64, 96):  # 2**23 multiply-adds and more: oneDNN's
            linear.linear(torch.randn(rows, 256), weight)
        linear.linear(torch.randn(2, 256), weight)  # too small: MKL's, not counted
    assert shapes == {(64, (1024, 256), False, False), (96, (1024, 256), False, False)}
    assert linear._onednn.__name__ == "_onednn"


def test_too_few_sentences_for_the_batches_is_refused_naming_the_fix(model_dir: Path, tmp_path: Path) -> None:
    split = tmp_path / "test.src"
    split.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    args = ["--model", str(model_dir), "--split-file", str(split), "--batches", "4", "--lines", "2"]
    result = CliRunner().invoke(decode_memory.main, args)
    assert result.exit_code == 2
    assert "holds 6 sentences" in result.output and "lower --batches" in result.output
