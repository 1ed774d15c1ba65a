"""Turning a fetched corpus file into line-aligned text: compression, archives, text and TSV.

`decompress` undoes gzip, xz or bzip2, known by magic bytes, never by name;
`archive_member` reads one file out of a tar (plain or compressed) or a zip.
`text_lines` applies the decoding policy of docs/corpus-decoding.md (one side
per file); `tsv_pairs` reads two columns of one tab-separated file. Every
problem with a file is a UserError that names it and says what to do.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import tarfile
import zipfile
import zlib
from collections.abc import Callable

from pipeline.errors import UserError

# --- compression and archives ----------------------------------------------------------

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


_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip's first file, or the end record of an empty zip
_LISTED = 20  # member names shown when the one asked for is not there


# Members are read into memory (TarFile.extractfile, ZipFile.read), never extracted to disk, so a
# member named ../x or /etc/x cannot write anywhere: names need no sanitizing.
def archive_member(data: bytes, member: str, name: str) -> bytes:
    """The bytes of the regular file `member` in a tar (plain, gzip, xz or bzip2) or zip archive."""
    if data.startswith(_ZIP_MAGIC):
        return _zip_member(data, member, name)
    return _tar_member(decompress(data, name), member, name)


def _tar_member(data: bytes, member: str, name: str) -> bytes:
    try:
        tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:")
    except tarfile.TarError as e:
        raise UserError(
            f"{name}: not a tar or zip archive, plain or compressed ({e}), so it holds no {member!r}; "
            "name the archive, or give the file no member"
        ) from e
    with tar:
        try:
            files = {info.name: info for info in tar.getmembers() if info.isfile()}  # the last copy wins
            found = tar.extractfile(files[_pick(list(files), member, name)])
            assert found is not None  # a regular file always has a file object
            return found.read()
        except tarfile.TarError as e:
            raise UserError(f"{name}: a corrupt or truncated tar archive ({e}); fetch it again") from e


def _zip_member(data: bytes, member: str, name: str) -> bytes:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = [info.filename for info in archive.infolist() if not info.is_dir()]
            picked = _pick(names, member, name)
            try:
                return archive.read(picked)
            except (NotImplementedError, RuntimeError) as e:  # a compression method or an encryption
                raise UserError(
                    f"{name}: cannot read {picked!r} ({e}); unpack the archive with another tool "
                    "and name the file itself"
                ) from e
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error, lzma.LZMAError) as e:
        raise UserError(f"{name}: a corrupt or truncated zip archive ({e}); fetch it again") from e


def _pick(names: list[str], member: str, name: str) -> str:
    """The name in `names` that `member` means (a leading ./ on either side ignored)."""
    if member in names:
        return member
    for candidate in names:
        if _bare(candidate) == _bare(member):
            return candidate
    shown = ", ".join(names[:_LISTED]) or "no regular files"
    more = f" ... and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
    raise UserError(
        f"{name}: the archive holds no file {member!r}; fix the member name. It holds: {shown}{more}"
    )


def _bare(path: str) -> str:
    while path.startswith("./"):
        path = path[2:]
    return path


# --- text and TSV ----------------------------------------------------------------------


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


def tsv_pairs(data: bytes, name: str, columns: tuple[int, int] = (0, 1)) -> tuple[list[str], list[str]]:
    """Two 0-based columns of a tab-separated file: every line split on every tab, no quoting."""
    lines = text_lines(data, name)
    width = lines[0].count("\t") + 1
    for column in columns:
        if not 0 <= column < width:
            raise UserError(
                f"{name}: no column {column} (0-based): its first line has {width} tab-separated "
                f"field(s), columns 0 to {width - 1}; fix the columns"
            )
    src, tgt = [], []
    for number, line in enumerate(lines, 1):
        fields = line.split("\t")
        if len(fields) != width:
            raise UserError(
                f"{name}: line {number} has {len(fields)} tab-separated field(s), the first line {width}; "
                "every line needs the same fields (a tab inside a sentence shifts them): fix the file"
            )
        src.append(fields[columns[0]])
        tgt.append(fields[columns[1]])
    return src, tgt
