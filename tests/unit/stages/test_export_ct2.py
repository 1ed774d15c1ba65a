"""The export-ct2 command: a model directory exported to CTranslate2, which translate then runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("ctranslate2")

from pipeline.interop import ct2
from pipeline.stages import export_ct2
from pipeline.stages import translate as translate_stage
from tests.support.models import make_ct2_model_dir


def run(args: list[str], stdin: bytes = b""):
    return CliRunner().invoke(translate_stage.command, args, input=stdin)


def test_export_command_and_int8_export_translate(tmp_path: Path) -> None:
    model_dir, _ = make_ct2_model_dir(tmp_path / "model")
    out = tmp_path / "ct2-int8"
    result = CliRunner().invoke(
        export_ct2.command, ["--model", str(model_dir), "--out", str(out), "--quantization", "int8"]
    )
    assert result.exit_code == 0, result.output
    assert {"model.bin", "config.json", "spm.model", ct2.INFO_FILE} <= {p.name for p in out.iterdir()}
    lines = run(["--model", str(out), "--device", "cpu", "--backend", "ctranslate2"], b"ein hund\n\nkind\n")
    assert lines.exit_code == 0, lines.output
    assert lines.stdout.count("\n") == 3 and lines.stdout.split("\n")[1] == ""
    refused = run(["--model", str(out), "--backend", "ctranslate2", "--quantization", "float32"], b"ein\n")
    assert refused.exit_code == 1 and "exported with quantization int8" in refused.output
