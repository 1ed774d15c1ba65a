"""Atomic outputs: a stage's output either is whole or is not there.

A later stage (or DVC) must never take a half-written file for a whole one,
so every output is written beside its final path and renamed into place.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml

from pipeline.errors import UserError

T = TypeVar("T")

SIDES = ("src", "tgt")  # the two sides of a parallel split, as its line files are named: {split}.{side}


def project_root() -> Path:
    """DVC_ROOT (set by DVC in every stage, also for --temp/--queue runs in a copy), else the cwd."""
    return Path(os.environ.get("DVC_ROOT") or Path.cwd()).resolve()


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success rename it over `path`.

    Works for a file or a directory written at the yielded path. On an
    exception the temporary is removed and `path` keeps what it had.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    target = tmp / path.name
    try:
        yield target
        if target.is_dir() and path.exists():
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        if target.is_file():
            _fsync(target)
        os.replace(target, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | Path, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def write_lines(path: str | Path, lines: list[str]) -> None:
    """One line per item, each ending in a newline (an empty list gives an empty file)."""
    write_text(path, "".join(line + "\n" for line in lines))


def read_lines(path: str | Path) -> list[str]:
    """Lines of a UTF-8 text file this pipeline wrote, without their newlines.

    Split on LF only, as download writes them: read_text's universal newlines
    would also end a line at a stray CR, which download keeps inside a line.
    """
    text = Path(path).read_bytes().decode("utf-8")
    return text.split("\n")[:-1] if text.endswith("\n") else (text.split("\n") if text else [])


class PairedWriter:
    """A split's two line files, STEM.src and STEM.tgt, written a chunk of lines at a time.

    Inside an atomic_path (or a scratch directory): the files are whole only when the stage is done.
    """

    def __init__(self, stem: str | Path) -> None:
        self.paths = {side: Path(f"{stem}.{side}") for side in SIDES}
        self._files = {side: open(path, "wb") for side, path in self.paths.items()}  # closed by close()

    def __enter__(self) -> PairedWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write_lines(self, side: str, lines: list[str]) -> None:
        """Lines without their newlines, to one side."""
        if lines:
            self._files[side].write(("\n".join(lines) + "\n").encode("utf-8"))

    def write_pair(self, src: bytes, tgt: bytes) -> None:
        """A chunk of each side, already encoded and newline-terminated, with as many lines each."""
        for side, data in zip(SIDES, (src, tgt)):
            self._files[side].write(data)

    def close(self) -> None:
        for f in self._files.values():
            f.close()


def batched(items: Iterable[T], n: int) -> Iterator[list[T]]:
    """`items` n at a time, the last batch shorter (itertools.batched, which Python 3.10 lacks)."""
    it = iter(items)
    while batch := list(itertools.islice(it, n)):
        yield batch


CHUNK = 1 << 20  # bytes read at a time by line_chunks


def line_chunks(path: str | Path) -> Iterator[list[str]]:
    """Lines of a UTF-8 file this pipeline wrote, split as read_lines does, a chunk (~1 MiB) at a time."""
    with open(path, "rb") as f:
        carry = b""
        for block in iter(lambda: f.read(CHUNK), b""):
            data = carry + block
            cut = data.rfind(b"\n") + 1
            data, carry = data[:cut], data[cut:]
            if data:
                yield data.decode("utf-8").split("\n")[:-1]
        if carry:
            yield [carry.decode("utf-8")]


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def read_yaml(path: Path, missing: str, error: type[UserError] = UserError) -> Any:
    """A YAML file's contents; a missing file or bad YAML is `error`, naming the file (and, for a
    missing one, `missing`: what to do)."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: no such file; {missing}") from None
    except yaml.YAMLError as e:
        raise error(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
