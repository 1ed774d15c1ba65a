"""Fetching a corpus file: from a local path, an offline mirror, or the network; verified by sha256.

Mirror: a folder that holds https://HOST/PATH at MIRROR/HOST/PATH, or an http(s)
server laid out the same way (a team's mirror); a file found there is read from
there. Otherwise it is downloaded (RETRY_DELAYS between tries) into a temporary
file renamed only once it is complete: a download cut off midway is tried again
from the start, never read. Every file is checked against the sum its params
give, the one pinned in the catalog (pipeline/data/catalog.yaml) and the md5 its
index publishes (sacreBLEU's); a URL that none of them pins is checked against
corpora.lock, where its first download recorded it (pipeline/data/lock.py).
Turning the bytes into lines: pipeline/data/containers.py and formats.py.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import click

from pipeline.data import corpora, lock
from pipeline.errors import UserError

RETRY_DELAYS = (1.0, 2.0, 4.0)  # seconds slept after failed tries 1, 2, 3: four tries in all

_sleep: Callable[[float], None] = time.sleep  # tests patch this so that retries do not wait

_CHUNK = 1 << 20

_TIMEOUT_S = 60

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")

_MIRROR_HELP = (
    "with no network, set the environment variable CORPUS_MIRROR (or data.mirror) "
    "to an offline mirror root that holds https://HOST/PATH at MIRROR/HOST/PATH"
)


@dataclass(frozen=True)
class FetchSpec:
    """One file to fetch: where it is, the param that named it, the sha256 it must have."""

    location: str  # a URL or a local path, as the user gave it
    key: str  # the param that named it, e.g. data.sources.europarl.src, for messages
    sha256: str | None
    md5: str | None = None  # the digest an index (sacreBLEU's) publishes for the file


Mirror = Path | str  # a folder, or the http(s) URL of a server with the same layout


@dataclass(frozen=True)
class Fetched:
    """A fetched file: where its bytes are now, how they got there, their sha256."""

    path: Path
    via: str  # mirror | network | local
    sha256: str


def fetch(spec: FetchSpec, scratch: Path, mirror: Mirror | None) -> Fetched:
    """Get the file's bytes (local path, mirror, or network into `scratch`) and verify its sha256."""
    match = _SCHEME.match(spec.location)
    if match is None:
        fetched = _fetch_local(spec)
    elif match.group(1).lower() in ("http", "https"):
        fetched = _fetch_url(spec.location, scratch, mirror)
    else:
        raise UserError(f"{spec.key}: {spec.location}: only http(s) URLs and local paths are supported")
    _verify(spec, fetched)
    return fetched


def _fetch_local(spec: FetchSpec) -> Fetched:
    path = Path(spec.location)
    if not path.is_file():
        raise UserError(f"{spec.key}: {path}: no such file; fix the path (relative to the current dir)")
    return Fetched(path, "local", sha256_file(path))


def _fetch_url(url: str, scratch: Path, mirror: Mirror | None) -> Fetched:
    if isinstance(mirror, Path):
        mirrored = mirror_path(mirror, url)
        if mirrored.is_file():
            return Fetched(mirrored, "mirror", sha256_file(mirrored))
    elif mirror is not None:
        found = _from_server_mirror(mirror_url(mirror, url), scratch)
        if found is not None:
            return found
    try:
        path = download_url(url, scratch)
    except FetchError as e:
        if mirror is None:
            raise UserError(f"cannot fetch {url}: {e}; {_MIRROR_HELP}") from e
        looked = mirror_url(mirror, url) if isinstance(mirror, str) else mirror_path(mirror, url).absolute()
        raise UserError(f"{url} is not in the mirror (looked for {looked}) and cannot be fetched: {e}") from e
    return Fetched(path, "network", sha256_file(path))


def _from_server_mirror(url: str, scratch: Path) -> Fetched | None:
    """The file from a mirror server; None if it does not have it (then the URL itself is asked)."""
    try:
        path = download_url(url, scratch)
    except FetchError as e:
        if isinstance(e.__cause__, urllib.error.HTTPError) and e.__cause__.code == 404:
            return None
        raise UserError(f"the corpus mirror failed to give {url}: {e}") from e
    return Fetched(path, "mirror", sha256_file(path))


def mirror_path(mirror: Path, url: str) -> Path:
    """Where the mirror keeps `url`: https://HOST/PATH -> MIRROR/HOST/PATH (as `wget -x` stores it)."""
    host, segments = _host_and_path(url)
    return Path(mirror, host, *segments)


def mirror_url(mirror: str, url: str) -> str:
    """Where a mirror server keeps `url`: https://HOST/PATH -> MIRROR/HOST/PATH."""
    host, segments = _host_and_path(url)
    return "/".join([mirror.rstrip("/"), host, *(urllib.parse.quote(s) for s in segments)])


def _host_and_path(url: str) -> tuple[str, list[str]]:
    parts = urllib.parse.urlsplit(url)
    segments = [urllib.parse.unquote(s) for s in parts.path.split("/") if s]
    if not parts.hostname or not segments or any(s in (".", "..") for s in segments):
        raise UserError(f"{url}: not a URL of a file (https://HOST/PATH)")
    return parts.hostname, segments


class FetchError(Exception):
    """The network did not give the file: after every try, or at once for an error that will last."""


def download_url(url: str, scratch: Path) -> Path:
    """Fetch `url` into a new file in `scratch`, retrying with backoff; raise FetchError at the end."""
    tries = len(RETRY_DELAYS) + 1
    for attempt in range(1, tries + 1):
        try:
            return _download_once(url, scratch)
        except (OSError, http.client.HTTPException) as e:  # URLError, timeouts, resets, a short body
            if _lasting(e):
                raise FetchError(f"{e} (not retried)") from e
            if attempt == tries:
                raise FetchError(f"failed {tries} tries, the last with: {e}") from e
            delay = RETRY_DELAYS[attempt - 1]
            click.echo(f"{url}: try {attempt} of {tries} failed ({e}); retrying in {delay:g} s", err=True)
            _sleep(delay)
    raise AssertionError("unreachable")


def _lasting(error: Exception) -> bool:
    """A 4xx answer (a 404, say) will not change by asking again; 408 and 429 may."""
    if not isinstance(error, urllib.error.HTTPError):
        return False
    return 400 <= error.code < 500 and error.code not in (408, 429)


def _download_once(url: str, scratch: Path) -> Path:
    """One try: stream into a temp file; it is deleted unless the whole body arrived."""
    fd, name = tempfile.mkstemp(prefix=".part.", dir=scratch)
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as f, urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response:
            received = 0
            while chunk := response.read(_CHUNK):
                f.write(chunk)
                received += len(chunk)
            # http.client returns a short body silently when the connection drops early.
            expected = response.headers.get("Content-Length")
            if expected is not None and int(expected) != received:
                raise OSError(f"connection closed after {received} of {expected} bytes")
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _expected_sums(spec: FetchSpec) -> list[tuple[str, str]]:
    """The sha256 sums a file must match, each with where it came from."""
    sums = []
    if spec.sha256 is not None:
        sums.append((spec.sha256, f"{spec.key}_sha256"))
    pinned = corpora.PINNED_SHA256.get(spec.location)
    if pinned is not None and pinned != spec.sha256:
        sums.append((pinned, "pinned in pipeline/data/catalog.yaml"))
    return sums


def verified_by(spec: FetchSpec) -> str | None:
    """Which sums the file was checked against, for the manifest: params, pinned, md5 (its index's),
    lock (corpora.lock), joined by +, or None (a local file nothing pins)."""
    sums = {"params": spec.sha256, "pinned": corpora.PINNED_SHA256.get(spec.location), "md5": spec.md5}
    if _SCHEME.match(spec.location) and not (sums["params"] or sums["pinned"]):
        sums["lock"] = "recorded"
    return "+".join(name for name, value in sums.items() if value) or None


def _verify(spec: FetchSpec, fetched: Fetched) -> None:
    expected = _expected_sums(spec)
    for want, origin in expected:
        if fetched.sha256 != want:
            detail = f"expected {want} ({origin}), got {fetched.sha256}"
            _refuse(spec, fetched, f"sha256 mismatch for {spec.location}", detail)
    if spec.md5 is not None:
        got = md5_file(fetched.path)
        if got != spec.md5:
            why = f"md5 mismatch for {spec.location}"
            _refuse(spec, fetched, why, f"expected {spec.md5} (published by its index), got {got}")
    if not expected and fetched.via != "local":
        try:
            if lock.check_or_record(spec.location, fetched.sha256):
                click.echo(
                    f"{spec.location}: sha256 {fetched.sha256} recorded in {lock.LOCK_FILE} (first "
                    "download); commit it, and every later download must match",
                    err=True,
                )
        except UserError:
            if fetched.via == "network":
                fetched.path.unlink()
            raise


def _refuse(spec: FetchSpec, fetched: Fetched, what: str, detail: str) -> NoReturn:
    if fetched.via == "network":
        fetched.path.unlink()  # never leave a bad download behind
    where = f" (read from the mirror at {fetched.path})" if fetched.via == "mirror" else ""
    raise UserError(
        f"{what}{where}: {detail}; the file is corrupt or changed upstream; check the source or the sum"
    )


def md5_file(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
