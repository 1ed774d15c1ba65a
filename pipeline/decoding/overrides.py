"""What one call may change of a model's decode settings, made from the schema alone.

A DecodeParams field (or decode.sampling's) marked `overridable` in pipeline/params/schema.py is
a keyword of Translator.translate, an option of the `translate` command and a request param of
the MLflow model: adding a decode setting a call may change is one field. `settings_with` applies
a call's values to the model's settings and checks them (pipeline.params.check_decode), its
messages naming each value as the caller wrote it (`sample=True`, `--sample`, ...).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from pipeline.errors import UserError
from pipeline.params import DecodeParams, check_decode
from pipeline.params.schema import OVERRIDE, Override


@dataclass(frozen=True)
class Setting:
    """One overridable setting: its keyword, the DecodeParams key it sets, its type, its help."""

    name: str
    key: str  # e.g. sampling.top_k, as check_decode names it
    kind: type  # int, float or bool
    spec: Override


def _walk(cls: type, prefix: str = "") -> Iterator[Setting]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            yield from _walk(kind, f"{prefix}{f.name}.")  # type: ignore[arg-type]
        elif OVERRIDE in f.metadata:
            spec = f.metadata[OVERRIDE]
            yield Setting(spec.name or f.name, prefix + f.name, kind, spec)


SETTINGS: tuple[Setting, ...] = tuple(_walk(DecodeParams))
SAMPLE = "sample"  # the keyword that turns sampling on; the other sampling.* values need it
# Each keyword -> the key it sets (n_best too: translate_nbest's argument, the n-best option)
FIELDS = {s.name: s.key for s in SETTINGS} | {"n_best": "n_best"}
SAMPLING_VALUES = tuple(s.name for s in SETTINGS if s.key.startswith("sampling.") and s.name != SAMPLE)
# The keyword arguments, as messages name them.
API_NAMES = {name: name for name in FIELDS} | {SAMPLE: f"{SAMPLE}=True"}


class Overrides(TypedDict, total=False):
    """Translator.translate's keywords (None: the model's setting), for type checkers: SETTINGS'
    names, which a test holds this to."""

    beam: int | None
    length_penalty: float | None
    batch_tokens: int | None
    sample: bool | None
    top_k: int | None
    top_p: float | None
    temperature: float | None
    seed: int | None
    no_repeat_ngram_size: int | None


def _replace_at(obj: Any, key: str, value: Any) -> Any:
    head, _, rest = key.partition(".")
    return dataclasses.replace(obj, **{head: _replace_at(getattr(obj, head), rest, value) if rest else value})


def settings_with(settings: DecodeParams, names: Mapping[str, str], given: Mapping[str, Any]) -> DecodeParams:
    """`settings` with the values `given` (FIELDS' names; None: unchanged), checked; a message
    names each value given as `names` does.

    `sample` True without a beam samples with beam 1: the width of a beam search means
    nothing to sampling, and an explicit beam > 1 is refused. A sampling value given
    while sampling stays off is refused too, rather than silently unused.
    """
    unknown = sorted(set(given) - set(FIELDS))
    if unknown:
        raise TypeError(f"unexpected decode setting {unknown[0]!r}; the settings: {', '.join(FIELDS)}")
    given = {name: value for name, value in given.items() if value is not None}
    enabled = given.get(SAMPLE, settings.sampling.enabled)
    for name in SAMPLING_VALUES:
        if name in given and not enabled:
            raise UserError(f"{names[name]}: applies to sampling only; turn it on with {names[SAMPLE]}")
    if given.get(SAMPLE) and "beam" not in given:
        given["beam"] = 1
    new = settings
    for name, value in given.items():
        new = _replace_at(new, FIELDS[name], value)
    check_decode(new, names={FIELDS[name]: names[name] for name in given}, error=UserError)
    return new
