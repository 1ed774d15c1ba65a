"""params.yaml is loaded into typed sections; bad keys and values are refused with one line, exit 2."""

import copy
import subprocess
import sys

import pytest
import yaml

from pipeline import params as P
from pipeline.errors import ParamsError
from tests.helpers import REPO


@pytest.fixture
def raw() -> dict:
    return yaml.safe_load((REPO / "params.yaml").read_text())


def refused(raw: dict) -> str:
    with pytest.raises(ParamsError) as e:
        P.from_dict(raw)
    message = e.value.message
    assert "\n" not in message
    return message


def test_defaults_load_typed(params):
    assert params.model.d_model == 256 and params.model.n_encoder_layers == params.model.n_layers
    assert params.train.betas == (0.9, 0.98) and isinstance(params.train.lr, float)
    assert P.from_dict(params.to_dict()) == params


def test_per_stack_depth_overrides(raw):
    raw["model"].update(n_layers=6, encoder_layers=10, decoder_layers=2)
    m = P.from_dict(raw).model
    assert (m.n_encoder_layers, m.n_decoder_layers) == (10, 2)


@pytest.mark.parametrize(
    "section, key, value, expected",
    [
        ("model", "dropuot", 0.1, "model.dropuot: unknown key"),
        ("model", "d_model", "256", "model.d_model: got '256'; expected a whole number"),
        ("model", "d_model", 250, "model.d_model: 250 is not divisible by model.n_heads=4"),
        ("model", "dropout", -0.1, "model.dropout: must be within [0, 1)"),
        ("model", "norm", "sandwich", "model.norm: got 'sandwich'; allowed: pre | post"),
        ("train", "betas", [0.9], "train.betas"),
        ("train", "val_bleu", "yes", "train.val_bleu: got 'yes'; expected true or false"),
        ("decode", "beam", 0, "decode.beam: must be at least 1"),
        ("bpe", "vocab_size", 6, "bpe.vocab_size: must exceed the 5 special tokens"),
    ],
)
def test_bad_values_are_refused_naming_the_key(raw, section, key, value, expected):
    raw[section][key] = value
    assert expected in refused(raw)


def test_tying_needs_a_joint_vocabulary(raw):
    raw["bpe"]["joint"] = False
    assert refused(copy.deepcopy(raw)).startswith("model.tie_embeddings:")
    raw["model"]["tie_embeddings"] = "target"
    P.from_dict(raw)


def test_missing_key_and_unknown_section(raw):
    del raw["train"]["lr"]
    assert refused(copy.deepcopy(raw)).startswith("train.lr: missing")
    raw["train"]["lr"] = 1e-3
    raw["extra"] = {}
    assert refused(raw).startswith("extra: unknown key")


def test_flatten():
    assert P.flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a.b": 1, "a.c.d": 2, "e": 3}


def test_cli_refuses_bad_params_with_exit_2_and_no_traceback(tmp_path, raw):
    raw["model"]["d_model"] = 250
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump(raw))
    out = tmp_path / "clean"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "clean",
            "--params",
            str(bad),
            "--raw",
            str(tmp_path),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "Error: model.d_model: 250 is not divisible by model.n_heads=4"
    ]
    assert not out.exists()
