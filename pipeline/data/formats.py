"""Turning a fetched corpus file into lines: compression undone, then the decoding policy.

`decompress` undoes gzip, xz or bzip2, known by magic bytes, never by name;
`text_lines` applies the decoding policy of docs/corpus-decoding.md: strict
UTF-8, LF line ends, nothing else changed. Every problem with a file is a
UserError that names it and says what to do.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from collections.abc import Callable

from pipeline.errors import UserError

# --- compression ----------------------------------------------------------------------

# bzip2's "BZh" + block size is followed by a block's magic (pi) or, in an empty stream, the end's
# (sqrt pi): checked too, since "BZh9" alone could start a text file.
_BZIP2_NEXT = (b"\x31\x41\x59\x26\x53\x59", b"\x17\x72\x45\x38\x50\x90")

_DECOMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.decompress,
    "xz": lzma.decompress,
    "bzip2": bz2.decompress,
}


def _compression(data: bytes) -> str | None:
    """gzip, xz or bzip2, from the magic bytes; None for anything else."""
    if data[:2] == b"\x1f\x8b":
        return "gzip"
    if data[:6] == b"\xfd7zXZ\x00":
        return "xz"
    if data[:3] == b"BZh" and data[3:4].isdigit() and data[4:10] in _BZIP2_NEXT:
        return "bzip2"
    return None


def decompress(data: bytes, name: str) -> bytes:
    """`data` with its gzip, xz or bzip2 compression undone (each checks its own length and CRC)."""
    kind = _compression(data)
    if kind is None:
        return data
    try:
        return _DECOMPRESS[kind](data)
    # gzip: OSError, EOFError or zlib.error; xz: LZMAError; bzip2: OSError, or ValueError if truncated
    except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as e:
        raise UserError(f"{name}: a corrupt or truncated {kind} file ({e}); fetch it again") from e


# --- text -----------------------------------------------------------------------------


def text_lines(data: bytes, name: str) -> list[str]:
    """Lines of a file (compressed or not) under the decoding policy of docs/corpus-decoding.md."""
    data = decompress(data, name)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    # Done on bytes, which is safe: 0x0D and 0x0A never occur inside a UTF-8 multi-byte character.
    data = data.replace(b"\r\n", b"\n")
    if b"\n" not in data:
        data = data.replace(b"\r", b"\n")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise UserError(
            f"{name}: invalid UTF-8 at line {line} ({e.reason}); re-encode the file as UTF-8"
        ) from e
    if not text:
        raise UserError(f"{name}: the file is empty (no lines); check the source")
    lines = text.split("\n")
    return lines[:-1] if text.endswith("\n") else lines
