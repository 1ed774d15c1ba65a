"""The import-hf command: an OPUS-MT directory in, a model directory that translate runs; a malformed
one stops with one line and writes nothing."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.stages import import_hf
from pipeline.stages import translate as translate_stage
from tests.support.hf import marian_pairs
from tests.support.repo import REPO

pytest.importorskip("transformers")


def run_import(source: Path | str, out: Path):
    return CliRunner().invoke(
        import_hf.command, [str(source), "--out", str(out), "--params", str(REPO / "params.yaml")]
    )


def test_imported_directory_translates_with_the_translate_command(marian_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "model"
    result = run_import(marian_dir, out)
    assert result.exit_code == 0, result.output
    assert {"model.pt", "params.yaml", "src.model", "tgt.model", "vocab.json"} <= {
        p.name for p in out.iterdir()
    }
    lines = "".join(s + "\n" for s, _ in marian_pairs(4, seed=3)) + "\n"
    translated = CliRunner().invoke(
        translate_stage.command, ["--model", str(out), "--device", "cpu"], input=lines
    )
    assert translated.exit_code == 0, translated.output
    outputs = translated.stdout.split("\n")
    assert len(outputs) == 6 and outputs[4] == "" and any(outputs[:4])
    params = (out / "params.yaml").read_text(encoding="utf-8")
    assert (
        "norm: post" in params and "positions: sinusoidal_marian" in params and "activation: swish" in params
    )


def _drop(name: str) -> Callable[[Path], None]:
    return lambda d: (d / name).unlink()


def _bert(d: Path) -> None:
    config = json.loads((d / "config.json").read_text(encoding="utf-8"))
    (d / "config.json").write_text(json.dumps(config | {"model_type": "bert"}), encoding="utf-8")


def _short_vocab(d: Path) -> None:
    vocab = json.loads((d / "vocab.json").read_text(encoding="utf-8"))
    del vocab[next(p for p, i in vocab.items() if i == len(vocab) - 2)]
    vocab["<pad>"] = len(vocab) - 1
    (d / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")


def _pre_ln(d: Path) -> None:
    config = json.loads((d / "config.json").read_text(encoding="utf-8"))
    (d / "config.json").write_text(json.dumps(config | {"normalize_before": True}), encoding="utf-8")


MALFORMED = {
    "no-source-spm": (_drop("source.spm"), "source.spm: missing"),
    "no-weights": (_drop("model.safetensors"), "no model.safetensors or pytorch_model.bin"),
    "no-config": (_drop("config.json"), "config.json: missing"),
    "bert-config": (_bert, "model_type='bert' is not a Marian model"),
    "vocab-disagrees-with-weights": (_short_vocab, "the weights' embedding has"),
    "pre-ln-config": (_pre_ln, "normalize_before=True"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_source_stops_with_one_line_and_writes_nothing(
    marian_dir: Path, tmp_path: Path, case: str
) -> None:
    break_it, message = MALFORMED[case]
    source = tmp_path / "source"
    shutil.copytree(marian_dir, source)
    break_it(source)
    out = tmp_path / "out" / "model"
    result = run_import(source, out)
    assert result.exit_code == 1, result.output
    assert message in result.output
    assert result.output.startswith("Error: ") and result.output.count("\n") == 1, result.output
    assert not out.parent.exists() or not any(out.parent.iterdir())  # nor a temporary left behind


def test_a_hub_name_offline_says_it_needs_network_or_a_local_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    result = run_import("Helsinki-NLP/opus-mt-xx-yy", tmp_path / "model")
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert "needs network access" in result.output and "local OPUS-MT directory" in result.output
    assert not (tmp_path / "model").exists()
