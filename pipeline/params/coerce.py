"""Plain values (YAML's, a checkpoint's) into the schema's dataclasses, each refused in one line
that names its key and what is allowed; and the helpers that name keys and show values."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import math
import types
import typing
from typing import Any, Literal

from pipeline.errors import ParamsError


def build(cls: type, raw: Any, where: str) -> Any:
    if not isinstance(raw, dict):
        raise ParamsError(f"{where or 'params'}: expected a mapping of keys, got {show_value(raw)}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(raw) - set(names))
    if unknown:
        key = join_key(where, str(unknown[0]))
        raise ParamsError(f"{key}: unknown key; allowed keys here: {', '.join(names)}")
    # Only a source spec has keys that may be left out (dataclass defaults); the rest come from params.yaml.
    optional = {f.name for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    missing = [n for n in names if n not in raw and n not in optional]
    if missing:
        raise ParamsError(f"{join_key(where, missing[0])}: missing; every key must be set in params.yaml")
    return cls(**{n: coerce(hints[n], raw[n], join_key(where, n)) for n in names if n in raw})


def coerce(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return build(tp, value, key)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        inner = [t for t in options if t is not type(None)]
        if len(inner) == 1:
            return coerce(inner[0], value, key)
        return coerce_either(inner, value, key)
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ParamsError(f"{key}: got {show_value(value)}; allowed: {' | '.join(map(str, allowed))}")
        return value
    if origin is dict:
        _, kind = typing.get_args(tp)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ParamsError(f"{key}: got {show_value(value)}; expected a mapping of names")
        return {str(k): coerce(kind, v, join_key(key, str(k))) for k, v in value.items()}
    if origin is tuple and typing.get_args(tp)[1:] == (Ellipsis,):
        kind = typing.get_args(tp)[0]
        # `-S data.test=name` or `-S distill.teacher_seeds=2` sets one item, not a list
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            value = [value]
        if value is None:
            return ()
        if not isinstance(value, (list, tuple)):
            raise ParamsError(f"{key}: got {show_value(value)}; expected a list")
        return tuple(coerce(kind, v, f"{key}[{i}]") for i, v in enumerate(value))
    if origin is tuple:
        kinds = typing.get_args(tp)
        if not isinstance(value, (list, tuple)) or len(value) != len(kinds):
            raise ParamsError(f"{key}: got {show_value(value)}; expected a list of {len(kinds)} numbers")
        return tuple(coerce(k, v, f"{key}[{i}]") for i, (k, v) in enumerate(zip(kinds, value)))
    if tp is bool:
        if not isinstance(value, bool):
            raise ParamsError(f"{key}: got {show_value(value)}; expected true or false")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ParamsError(f"{key}: got {show_value(value)}; expected a whole number")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ParamsError(f"{key}: got {show_value(value)}; expected a finite number")
        return float(value)
    if tp is str:
        if not isinstance(value, str) or not value:
            raise ParamsError(f"{key}: got {show_value(value)}; expected a non-empty string")
        return value
    raise TypeError(f"params.py cannot coerce type {tp!r} for {key}")  # a developer's error


def coerce_either(options: list[Any], value: Any, key: str) -> Any:
    """The value as the first of `options` it fits (int | Literal["auto"]: a number or the word)."""
    for option in options:
        try:
            return coerce(option, value, key)
        except ParamsError:
            continue
    allowed = " or ".join(
        " | ".join(map(str, typing.get_args(o))) if typing.get_origin(o) is Literal else KINDS[o]
        for o in options
    )
    raise ParamsError(f"{key}: got {show_value(value)}; expected {allowed}")


KINDS = {int: "a whole number", float: "a number", str: "a string", bool: "true or false"}


def join_key(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def show_value(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}; for MLflow params and report tables."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = join_key(prefix, key)
        if isinstance(value, dict):
            flat.update(flatten(value, name))
        else:
            flat[name] = value
    return flat


def param_text(value: Any) -> str:
    """A param value as params.yaml spells it, whether it came from MLflow (a str) or DVC (typed)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(param_text(v) for v in value) + "]"  # YAML flow style, as -S takes it
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {param_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str):
        # MLflow holds str() of the Python value.
        if (value[:1], value[-1:]) in (("[", "]"), ("{", "}")):
            with contextlib.suppress(ValueError, SyntaxError):
                return param_text(ast.literal_eval(value))
        return {"None": "null", "True": "true", "False": "false"}.get(value, value)
    return str(value)
