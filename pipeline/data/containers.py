"""Containers of a fetched corpus file: compression and archives, streamed.

`open_decompressed` undoes gzip, xz or bzip2 (known by magic bytes, never by name),
`open_member` opens one file of a tar (plain or compressed) or a zip, a chunk at a
time (memory bounded by CHUNK, not by the file); `decompress` and `archive_member`
do the same for whole bytes in memory. What a file holds once opened is
formats.py's. Every problem with a file is a UserError that names it and says what
to do.
"""

from __future__ import annotations

import bz2
import contextlib
import fnmatch
import gzip
import io
import lzma
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from typing import IO, Any

from pipeline.errors import UserError

CHUNK = 1 << 20  # bytes read at a time: what a file costs in memory, whatever its size

# bzip2's "BZh" + block size is followed by a block's magic (pi) or, in an empty stream, the end's
# (sqrt pi): checked too, since "BZh9" alone could start a text file.
_BZIP2_NEXT = (b"\x31\x41\x59\x26\x53\x59", b"\x17\x72\x45\x38\x50\x90")

_DECOMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.decompress,
    "xz": lzma.decompress,
    "bzip2": bz2.decompress,
}
_DECOMPRESSOR: dict[str, Callable[[IO[bytes]], io.BufferedIOBase]] = {
    "gzip": lambda f: gzip.GzipFile(fileobj=f, mode="rb"),
    "xz": lzma.LZMAFile,
    "bzip2": bz2.BZ2File,
}
# What reading corrupt data raises: gzip OSError, EOFError or zlib.error; xz LZMAError; bzip2 OSError,
# or ValueError if truncated; zip BadZipFile (a CRC); tar TarError (a member cut short).
_READ_ERRORS = (
    OSError,
    EOFError,
    ValueError,
    zlib.error,
    lzma.LZMAError,
    zipfile.BadZipFile,
    tarfile.TarError,
)


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
    except _READ_ERRORS as e:
        raise UserError(f"{name}: a corrupt or truncated {kind} file ({e}); fetch it again") from e


class _Guarded(io.RawIOBase):
    """A stream whose read errors (corrupt or truncated data) are UserErrors: `what` ({e}); fetch it again."""

    def __init__(self, inner: IO[bytes] | io.BufferedIOBase, what: str) -> None:
        super().__init__()
        self._inner, self._what = inner, what

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            data = self._inner.read(len(buffer))
        except _READ_ERRORS as e:
            raise UserError(f"{self._what} ({e}); fetch it again") from e
        buffer[: len(data)] = data
        return len(data)

    # tarfile seeks in a (decompressed) archive: passed through
    def seekable(self) -> bool:
        return self._inner.seekable()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        try:
            return self._inner.seek(offset, whence)
        except _READ_ERRORS as e:
            raise UserError(f"{self._what} ({e}); fetch it again") from e

    def tell(self) -> int:
        return self._inner.tell()


def _guarded(inner: IO[bytes] | io.BufferedIOBase, what: str) -> IO[bytes]:
    return io.BufferedReader(_Guarded(inner, what), CHUNK)


def _head(stream: IO[bytes]) -> bytes:
    """The stream's first bytes (enough for any magic), left unread."""
    peek = getattr(stream, "peek", None)
    if peek is not None:
        return bytes(peek(16)[:16])
    at = stream.tell()
    head = stream.read(16)
    stream.seek(at)
    return head


def open_decompressed(stream: IO[bytes], name: str) -> IO[bytes]:
    """`stream` read through its gzip, xz or bzip2 decompressor (none if plain), a chunk at a time."""
    kind = _compression(_head(stream))
    if kind is None:
        return stream
    return _guarded(_DECOMPRESSOR[kind](stream), f"{name}: a corrupt or truncated {kind} file")


_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip's first file, or the end record of an empty zip
_LISTED = 20  # member names shown when the one asked for is not there


# Members are read as streams (TarFile.extractfile, ZipFile.open), never extracted to disk, so a
# member named ../x or /etc/x cannot write anywhere: names need no sanitizing.
def archive_member(data: bytes, member: str, name: str) -> bytes:
    """The bytes of the regular file `member` in a tar (plain, gzip, xz or bzip2) or zip archive."""
    with open_member(io.BytesIO(data), member, name) as found:
        return found.read()


@contextlib.contextmanager
def open_member(archive: IO[bytes], member: str, name: str) -> Iterator[IO[bytes]]:
    """The regular file `member` of a tar or zip `archive` (a seekable stream), as a stream of its bytes."""
    if _head(archive).startswith(_ZIP_MAGIC):
        with _zip_member(archive, member, name) as found:
            yield found
    else:
        with _tar_member(archive, member, name) as found:
            yield found


@contextlib.contextmanager
def _tar_member(archive: IO[bytes], member: str, name: str) -> Iterator[IO[bytes]]:
    stream = open_decompressed(archive, name)
    try:
        tar = tarfile.open(fileobj=stream, mode="r:")
    except tarfile.TarError as e:
        raise UserError(
            f"{name}: not a tar or zip archive, plain or compressed ({e}), so it holds no {member!r}; "
            "name the archive, or give the file no member"
        ) from e
    with tar:
        try:
            files = {info.name: info for info in tar.getmembers() if info.isfile()}  # the last copy wins
            # Read on to the end: a compressed archive's length and CRC are checked there, which is
            # what catches a truncated download before any member is used.
            while stream.read(CHUNK):
                pass
            found = tar.extractfile(files[_pick(list(files), member, name)])
            assert found is not None  # a regular file always has a file object
        except tarfile.TarError as e:
            raise UserError(f"{name}: a corrupt or truncated tar archive ({e}); fetch it again") from e
        yield _guarded(found, f"{name}: a corrupt or truncated tar archive")


@contextlib.contextmanager
def _zip_member(archive_file: IO[bytes], member: str, name: str) -> Iterator[IO[bytes]]:
    try:
        archive = zipfile.ZipFile(archive_file)
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise UserError(f"{name}: a corrupt or truncated zip archive ({e}); fetch it again") from e
    with archive:
        names = [info.filename for info in archive.infolist() if not info.is_dir()]
        picked = _pick(names, member, name)
        try:
            found = archive.open(picked)
        except (NotImplementedError, RuntimeError) as e:  # a compression method or an encryption
            raise UserError(
                f"{name}: cannot read {picked!r} ({e}); unpack the archive with another tool "
                "and name the file itself"
            ) from e
        except _READ_ERRORS as e:
            raise UserError(f"{name}: a corrupt or truncated zip archive ({e}); fetch it again") from e
        with found:
            yield _guarded(found, f"{name}: a corrupt or truncated zip archive")


def _pick(names: list[str], member: str, name: str) -> str:
    """The name in `names` that `member` means (a leading ./ on either side ignored); a member with
    glob characters (mtdata's `*.en` for an OPUS zip) must match exactly one name."""
    if member in names:
        return member
    for candidate in names:
        if _bare(candidate) == _bare(member):
            return candidate
    if any(c in member for c in "*?["):
        matched = [n for n in names if fnmatch.fnmatchcase(_bare(n), _bare(member))]
        if len(matched) == 1:
            return matched[0]
        if matched:
            raise UserError(
                f"{name}: {len(matched)} files match {member!r} ({', '.join(matched[:_LISTED])}); "
                "name the one to read"
            )
    shown = ", ".join(names[:_LISTED]) or "no regular files"
    more = f" ... and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
    raise UserError(
        f"{name}: the archive holds no file {member!r}; fix the member name. It holds: {shown}{more}"
    )


def _bare(path: str) -> str:
    while path.startswith("./"):
        path = path[2:]
    return path
