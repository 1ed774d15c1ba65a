"""Checkpoints: weights only, clear errors for bad files and mismatched models, atomic saves."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest
import torch

from pipeline import params
from pipeline.errors import UserError
from pipeline.model import checkpoint
from pipeline.model.transformer import build_model
from tests.support.repo import REPO

BASE = params.load(REPO / "params.yaml")
VOCAB = 23


def _params(**model) -> params.Params:
    sizes = dict(d_model=32, n_heads=4, d_ff=64, n_layers=2, encoder_layers=None, decoder_layers=None)
    return dataclasses.replace(BASE, model=dataclasses.replace(BASE.model, **{**sizes, **model}))


def _payload(p: params.Params, src_vocab: int = VOCAB, tgt_vocab: int = VOCAB) -> dict:
    torch.manual_seed(0)
    model = build_model(p.model, src_vocab, tgt_vocab)
    return checkpoint.model_payload(model, p, src_vocab, tgt_vocab, step=3)


def _one_line(message: str) -> None:
    assert "\n" not in message and len(message) < 400, message


# --- loading bad files ---------------------------------------------------------------------


def _leave_a_mark(path: str) -> None:
    """What the malicious checkpoint would run: harmless, but visible."""
    Path(path).write_text("the checkpoint ran code")


class CarriesCode:
    """Unpickling this calls _leave_a_mark, as a hostile file would call os.system."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (_leave_a_mark, (self.marker,))


def _hostile_checkpoint(tmp_path: Path, marker: Path) -> Path:
    path = tmp_path / "hostile.pt"
    torch.save({"model": {"w": torch.ones(2)}, "extra": CarriesCode(marker)}, path)
    return path


def test_a_checkpoint_carrying_code_is_refused_and_the_code_never_runs(tmp_path):
    marker = tmp_path / "marker"
    path = _hostile_checkpoint(tmp_path, marker)
    with pytest.raises(UserError, match="refused") as err:
        checkpoint.load(path)
    assert not marker.exists()
    _one_line(err.value.message)
    assert str(path) in err.value.message
    # The file really is hostile: an unsafe load runs its code.
    torch.load(path, weights_only=False)
    assert marker.read_text() == "the checkpoint ran code"


def test_the_refusal_names_what_was_refused(tmp_path):
    path = _hostile_checkpoint(tmp_path, tmp_path / "marker")
    with pytest.raises(UserError) as err:
        checkpoint.load(path)
    assert "\x1b[" not in err.value.message
    assert "_leave_a_mark" in err.value.message


def test_a_truncated_checkpoint_is_reported_as_truncated_or_corrupt(tmp_path):
    path = tmp_path / "model.pt"
    checkpoint.save(path, _payload(_params()))
    whole = path.read_bytes()
    for cut in (len(whole) // 2, len(whole) - 1):
        path.write_bytes(whole[:cut])
        with pytest.raises(UserError, match="truncated or corrupt") as err:
            checkpoint.load(path)
        _one_line(err.value.message)


def test_random_bytes_are_a_user_error(tmp_path):
    path = tmp_path / "model.pt"
    path.write_bytes(os.urandom(2000))
    with pytest.raises(UserError) as err:
        checkpoint.load(path)
    assert str(path) in err.value.message


def test_random_bytes_are_reported_as_corrupt(tmp_path):
    path = tmp_path / "model.pt"
    path.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(UserError, match="truncated or corrupt"):
        checkpoint.load(path)


def test_a_missing_checkpoint_says_to_train_first(tmp_path):
    with pytest.raises(UserError, match="no such checkpoint"):
        checkpoint.load(tmp_path / "absent.pt")


def test_a_file_that_is_not_a_dict_is_refused(tmp_path):
    path = tmp_path / "list.pt"
    torch.save([torch.ones(2)], path)
    with pytest.raises(UserError, match="not a checkpoint of this pipeline"):
        checkpoint.load(path)


# --- restoring into the wrong model --------------------------------------------------------------


def test_round_trip_keeps_payload_fields_and_weights(tmp_path):
    p = _params()
    payload = _payload(p)
    path = tmp_path / "model.pt"
    checkpoint.save(path, payload)
    obj = checkpoint.load(path)
    assert obj["format"] == checkpoint.FORMAT and obj["step"] == 3
    assert params.from_dict(obj["params"]) == p
    model, restored = checkpoint.restore_model(obj, path)
    assert restored == p
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, payload["model"][name]), name


def test_weights_for_a_different_vocabulary_name_the_tensor(tmp_path):
    payload = _payload(_params())
    payload["tgt_vocab"] = payload["src_vocab"] = VOCAB + 6  # the model built will not fit the weights
    with pytest.raises(UserError) as err:
        checkpoint.restore_model(payload, tmp_path / "model.pt")
    message = err.value.message
    _one_line(message)
    # The first vocabulary-sized tensor in the state dict; with tying they are one tensor.
    named = r"(out_weight|(src|tgt)_embed\.tokens\.weight)"
    assert re.search(named + r" has shape \(23, 32\), the model expects \(29, 32\)", message)
    assert "different vocabulary" in message
    assert "size mismatch" not in message  # not torch's shape dump


def test_load_weights_into_a_model_with_another_vocabulary(tmp_path):
    p = _params(tie_embeddings="none")
    state = _payload(p, VOCAB, VOCAB)["model"]
    other = build_model(p.model, VOCAB, VOCAB + 1)  # only the target side differs
    named = r"(out_weight|tgt_embed\.tokens\.weight)"
    with pytest.raises(UserError, match=named + r" has shape \(23, 32\)") as err:
        checkpoint.load_weights(other, state, "model.pt")
    _one_line(err.value.message)


@pytest.mark.parametrize(
    "change, names",
    [
        ({"n_layers": 3}, "decoder.2."),  # the checkpoint lacks a layer (names listed sorted)
        ({"norm": "post"}, "decoder_norm"),  # pre-LN's final norms are unexpected
        ({"arch": "decoder_only"}, "blocks.0."),
    ],
)
def test_weights_for_a_different_architecture_name_the_mismatch(tmp_path, change, names):
    payload = _payload(_params())
    payload["params"] = _params(**change).to_dict()
    with pytest.raises(UserError, match="different architecture") as err:
        checkpoint.restore_model(payload, tmp_path / "model.pt")
    _one_line(err.value.message)
    assert names in err.value.message


def test_a_payload_of_another_format_is_refused(tmp_path):
    payload = _payload(_params())
    payload["format"] = "someone-else/2"
    with pytest.raises(UserError, match="not a model of this pipeline"):
        checkpoint.restore_model(payload, tmp_path / "model.pt")


# --- atomic saves ----------------------------------------------------------------------------


def test_a_failed_save_leaves_the_previous_file_and_no_temporaries(tmp_path, monkeypatch):
    path = tmp_path / "model.pt"
    checkpoint.save(path, {"step": 1, "w": torch.arange(4)})
    before = path.read_bytes()

    def disk_full(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(OSError, match="No space left"):
        checkpoint.save(path, {"step": 2, "w": torch.arange(8)})
    monkeypatch.undo()

    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]
    assert checkpoint.load(path)["step"] == 1


def test_save_creates_parent_directories_and_replaces_the_file(tmp_path):
    path = tmp_path / "model" / "model.pt"
    checkpoint.save(path, {"step": 1})
    checkpoint.save(path, {"step": 2})
    assert checkpoint.load(path) == {"step": 2}
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.pt"]
