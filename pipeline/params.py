"""Typed, validated params: one frozen dataclass per section of params.yaml.

Defaults live in params.yaml, nowhere else: every field here is required, so a
key missing from the file is an error, as is a key the dataclass lacks. Params
are loaded once, at the CLI boundary (`load`), and refused there with a
one-line message that names the key and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from pipeline.errors import ParamsError, UserError
from pipeline.tokens import N_SPECIAL


@dataclass(frozen=True)
class SideFiles:
    """One split of a user's bitext: a URL or local path per side, plain or .gz."""

    src: str | None
    tgt: str | None
    src_sha256: str | None
    tgt_sha256: str | None


@dataclass(frozen=True)
class Bitext:
    train: SideFiles
    val: SideFiles
    test: SideFiles


@dataclass(frozen=True)
class DataParams:
    corpus: Literal["multi30k", "bitext"]
    src_lang: str
    tgt_lang: str
    mirror: str | None
    multi30k_test: Literal["test_2016_flickr", "test_2017_flickr", "test_2017_mscoco", "test_2018_flickr"]
    bitext: Bitext
    heldout_seed: int
    heldout_val: int
    heldout_test: int


@dataclass(frozen=True)
class CleanParams:
    max_words: int
    max_ratio: float
    dedupe: bool


@dataclass(frozen=True)
class BpeParams:
    joint: bool
    vocab_size: int
    character_coverage: float
    byte_fallback: bool


@dataclass(frozen=True)
class ModelParams:
    arch: Literal["encoder_decoder", "decoder_only"]
    d_model: int
    n_heads: int
    d_ff: int
    n_layers: int
    encoder_layers: int | None
    decoder_layers: int | None
    norm: Literal["pre", "post"]
    positions: Literal["sinusoidal", "learned"]
    max_positions: int
    tie_embeddings: Literal["all", "target", "none"]
    output_bias: bool
    scale_embeddings: bool
    activation: Literal["relu", "gelu"]
    dropout: float
    attention_dropout: float
    activation_dropout: float

    @property
    def n_encoder_layers(self) -> int:
        return self.n_layers if self.encoder_layers is None else self.encoder_layers

    @property
    def n_decoder_layers(self) -> int:
        return self.n_layers if self.decoder_layers is None else self.decoder_layers


@dataclass(frozen=True)
class TrainParams:
    device: Literal["auto", "cpu", "cuda"]
    precision: Literal["fp32", "bf16", "fp16"]
    compile: bool
    seed: int
    max_tokens: int
    update_freq: int
    optimizer: Literal["adam", "adamw"]
    lr: float
    betas: tuple[float, float]
    eps: float
    weight_decay: float
    warmup_steps: int
    clip_norm: float
    label_smoothing: float
    max_epochs: int
    max_steps: int
    validate_every: int
    val_bleu: bool
    early_stop_metric: Literal["bleu", "loss"]
    patience: int
    keep_last: int
    average_last: int
    skip_bad_batches: bool
    log_every: int
    threads: int


@dataclass(frozen=True)
class DecodeParams:
    beam: int
    length_penalty: float
    max_len_a: float
    max_len_b: int
    batch_tokens: int
    n_best: int


@dataclass(frozen=True)
class TrackingParams:
    experiment: str


@dataclass(frozen=True)
class Params:
    data: DataParams
    clean: CleanParams
    bpe: BpeParams
    model: ModelParams
    train: TrainParams
    decode: DecodeParams
    tracking: TrackingParams

    def to_dict(self) -> dict[str, Any]:
        return _to_plain(dataclasses.asdict(self))


SECTIONS = {f.name: f.type for f in dataclasses.fields(Params)}


# --- loading ----------------------------------------------------------------


def load(path: str | Path = "params.yaml") -> Params:
    """Read, type-check and validate params.yaml; raise ParamsError on any fault."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ParamsError(f"{path}: no such file; run from the repository root or pass --params") from None
    except yaml.YAMLError as e:
        raise ParamsError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from e
    return from_dict(raw)


def from_dict(raw: Any) -> Params:
    """Build Params from a plain nested dict (as read from YAML or a checkpoint)."""
    params = _build(Params, raw, "")
    validate(params)
    return params


def _build(cls: type, raw: Any, where: str) -> Any:
    if not isinstance(raw, dict):
        raise ParamsError(f"{where or 'params'}: expected a mapping of keys, got {_show(raw)}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(raw) - set(names))
    if unknown:
        key = _join(where, str(unknown[0]))
        raise ParamsError(f"{key}: unknown key; allowed keys here: {', '.join(names)}")
    missing = [n for n in names if n not in raw]
    if missing:
        raise ParamsError(f"{_join(where, missing[0])}: missing; every key must be set in params.yaml")
    return cls(**{n: _coerce(hints[n], raw[n], _join(where, n)) for n in names})


def _coerce(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _build(tp, value, key)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        (inner,) = [t for t in options if t is not type(None)]
        return _coerce(inner, value, key)
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ParamsError(f"{key}: got {_show(value)}; allowed: {' | '.join(map(str, allowed))}")
        return value
    if origin is tuple:
        kinds = typing.get_args(tp)
        if not isinstance(value, (list, tuple)) or len(value) != len(kinds):
            raise ParamsError(f"{key}: got {_show(value)}; expected a list of {len(kinds)} numbers")
        return tuple(_coerce(k, v, f"{key}[{i}]") for i, (k, v) in enumerate(zip(kinds, value)))
    if tp is bool:
        if not isinstance(value, bool):
            raise ParamsError(f"{key}: got {_show(value)}; expected true or false")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ParamsError(f"{key}: got {_show(value)}; expected a whole number")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ParamsError(f"{key}: got {_show(value)}; expected a finite number")
        return float(value)
    if tp is str:
        if not isinstance(value, str) or not value:
            raise ParamsError(f"{key}: got {_show(value)}; expected a non-empty string")
        return value
    raise TypeError(f"params.py cannot coerce type {tp!r} for {key}")  # a developer's error


# --- validation of values and of how sections fit together --------------------


def _check(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ParamsError(f"{key}: {message}")


def validate(p: Params) -> None:
    """Refuse values that are well-typed but invalid or inconsistent."""
    d, c, b, m, t, dec = p.data, p.clean, p.bpe, p.model, p.train, p.decode

    _check(d.src_lang != d.tgt_lang, "data.tgt_lang", "must differ from data.src_lang")
    if d.corpus == "bitext":
        _check(
            d.bitext.train.src is not None and d.bitext.train.tgt is not None,
            "data.bitext.train",
            "corpus: bitext needs src and tgt (a URL or a path) for train",
        )
        for split in ("val", "test"):
            sides = getattr(d.bitext, split)
            _check(
                (sides.src is None) == (sides.tgt is None),
                f"data.bitext.{split}",
                "give both src and tgt, or neither (then it is held out of train)",
            )
    for name in ("heldout_val", "heldout_test"):
        _check(getattr(d, name) >= 1, f"data.{name}", "must be at least 1")

    _check(c.max_words >= 1, "clean.max_words", "must be at least 1")
    _check(c.max_ratio >= 1.0, "clean.max_ratio", "must be at least 1.0")

    _check(
        b.vocab_size > N_SPECIAL + 2, "bpe.vocab_size", f"must exceed the {N_SPECIAL} special tokens plus 2"
    )
    _check(0.9 <= b.character_coverage <= 1.0, "bpe.character_coverage", "must be within [0.9, 1.0]")

    for name in ("d_model", "n_heads", "d_ff", "n_layers", "max_positions"):
        _check(getattr(m, name) >= 1, f"model.{name}", "must be at least 1")
    _check(
        m.d_model % m.n_heads == 0,
        "model.d_model",
        f"{m.d_model} is not divisible by model.n_heads={m.n_heads}",
    )
    for name in ("encoder_layers", "decoder_layers"):
        value = getattr(m, name)
        _check(value is None or value >= 1, f"model.{name}", "must be null (use n_layers) or at least 1")
    for name in ("dropout", "attention_dropout", "activation_dropout"):
        _check(0.0 <= getattr(m, name) < 1.0, f"model.{name}", "must be within [0, 1)")
    _check(
        not (m.tie_embeddings == "all" and not b.joint),
        "model.tie_embeddings",
        "'all' ties source and target embeddings, which needs bpe.joint: true; use 'target' or 'none'",
    )
    _check(
        not (m.arch == "decoder_only" and not b.joint),
        "model.arch",
        "decoder_only reads source and target with one embedding table; it needs bpe.joint: true",
    )

    _check(t.max_tokens >= 1, "train.max_tokens", "must be at least 1")
    _check(t.update_freq >= 1, "train.update_freq", "must be at least 1")
    _check(t.lr > 0, "train.lr", "must be positive")
    _check(all(0.0 <= x < 1.0 for x in t.betas), "train.betas", "each must be within [0, 1)")
    _check(t.eps > 0, "train.eps", "must be positive")
    _check(t.weight_decay >= 0, "train.weight_decay", "must be non-negative")
    _check(t.warmup_steps >= 0, "train.warmup_steps", "must be non-negative")
    _check(t.clip_norm >= 0, "train.clip_norm", "must be non-negative (0: no clipping)")
    _check(0.0 <= t.label_smoothing < 1.0, "train.label_smoothing", "must be within [0, 1)")
    _check(t.max_epochs >= 1, "train.max_epochs", "must be at least 1")
    for name in ("max_steps", "validate_every", "average_last", "threads"):
        _check(getattr(t, name) >= 0, f"train.{name}", "must be non-negative (0: off)")
    _check(t.patience >= 0, "train.patience", "must be non-negative (0: no early stopping)")
    _check(t.keep_last >= 1, "train.keep_last", "must be at least 1")
    _check(
        t.average_last <= t.keep_last,
        "train.average_last",
        f"cannot average more checkpoints than train.keep_last={t.keep_last} keeps",
    )
    _check(t.log_every >= 1, "train.log_every", "must be at least 1")
    _check(
        not (t.early_stop_metric == "bleu" and not t.val_bleu),
        "train.early_stop_metric",
        "'bleu' needs train.val_bleu: true; use 'loss'",
    )

    check_decode(dec)


DECODE_KEYS = {f.name: f"decode.{f.name}" for f in dataclasses.fields(DecodeParams)}


def check_decode(
    dec: DecodeParams, names: Mapping[str, str] | None = None, error: type[UserError] = ParamsError
) -> None:
    """Refuse decode settings that are invalid or inconsistent, wherever they came from.

    Each message names the setting as the user gave it: its params key (DECODE_KEYS), or what
    `names` maps the field to (a command-line option, a keyword argument). A command passes
    error=UserError: exit 2 is for params.yaml.
    """
    key = {**DECODE_KEYS, **(names or {})}

    def check(ok: bool, field: str, message: str) -> None:
        if not ok:
            raise error(f"{key[field]}: {message}")

    check(dec.beam >= 1, "beam", "must be at least 1 (1 is greedy)")
    check(1 <= dec.n_best <= dec.beam, "n_best", f"must be within [1, {key['beam']}={dec.beam}]")
    check(dec.length_penalty >= 0, "length_penalty", "must be non-negative")
    limits = "max_len_a and max_len_b"
    check(dec.max_len_a >= 0 and dec.max_len_b >= 0, "max_len_a", f"{limits} must be non-negative")
    check(dec.max_len_a > 0 or dec.max_len_b > 0, "max_len_b", f"{limits} cannot both be 0")
    check(dec.batch_tokens >= 1, "batch_tokens", "must be at least 1")


# --- helpers -------------------------------------------------------------------


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _to_plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_plain(v) for v in value]
    return value


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}; for MLflow params and report tables."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = _join(prefix, key)
        if isinstance(value, dict):
            flat.update(flatten(value, name))
        else:
            flat[name] = value
    return flat
