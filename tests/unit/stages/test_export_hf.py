"""The export-hf command: a directory transformers loads, or one line saying which setting blocks it."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.stages import export_hf
from tests.support.models import make_ct2_model_dir

transformers = pytest.importorskip("transformers")


def test_export_writes_what_the_auto_classes_load_and_a_model_card(tmp_path: Path) -> None:
    model_dir, _ = make_ct2_model_dir(tmp_path / "model", tie="all")
    out = tmp_path / "hf"
    result = CliRunner().invoke(export_hf.command, ["--model", str(model_dir), "--out", str(out)])
    assert result.exit_code == 0, result.output
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(out)
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert type(model).__name__ == "PegasusForConditionalGeneration"  # the default, pre-LN
    assert type(tokenizer).__name__ == "MarianTokenizer"
    assert "No reports/metrics.json was found" in (out / "README.md").read_text(encoding="utf-8")


def test_a_setting_transformers_cannot_express_exits_1_with_one_line(tmp_path: Path) -> None:
    model_dir, _ = make_ct2_model_dir(tmp_path / "model", tie="none")
    result = CliRunner().invoke(export_hf.command, ["--model", str(model_dir), "--out", str(tmp_path / "hf")])
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert "model.tie_embeddings=none" in result.output and "tie_embeddings: all" in result.output
    assert not (tmp_path / "hf").exists()
