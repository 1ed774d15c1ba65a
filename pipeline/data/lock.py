"""corpora.lock: the sha256 of every downloaded file that no params, catalog or index pins.

Trust on first use, as Go's go.sum and pip's hash-checking mode do: the first
download of such a URL records its sum here, at the project's root (kept in
git, so every clone and machine checks the same bytes); every later download
must match it, or the stage stops naming the file and both sums. One line a
file, `SHA256  URL`, sorted (the format of sha256sum's lists).
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

from pipeline.errors import UserError
from pipeline.files import atomic_path, project_root

LOCK_FILE = "corpora.lock"
HEADER = (
    "# sha256 of corpus files first fetched by this project (trust on first use); kept in git.\n"
    "# A file whose sum changed upstream on purpose: delete its line and fetch again.\n"
)


def lock_path() -> Path:
    return project_root() / LOCK_FILE


def read(path: Path) -> dict[str, str]:
    """URL -> sha256 of the lock at `path` ({} if there is none)."""
    if not path.is_file():
        return {}
    sums = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        digest, _, url = line.partition("  ")
        if len(digest) != 64 or not url:
            raise UserError(f"{path}:{number}: expected `SHA256  URL`, got {line!r}; fix or delete the line")
        sums[url] = digest
    return sums


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise writers across processes (two stages fetching at once)."""
    with open(path.with_name(f".{path.name}.flock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def check_or_record(url: str, sha256: str, path: Path | None = None) -> bool:
    """True if `url`'s sum was recorded now; a sum unlike the recorded one is refused."""
    path = path or lock_path()
    recorded = read(path).get(url)
    if recorded == sha256:
        return False
    if recorded is not None:
        raise UserError(
            f"sha256 of {url} changed since {path.name} recorded it: recorded {recorded}, got {sha256}; "
            f"the file changed upstream or is corrupt. If the change is wanted, delete its line from "
            f"{path} and fetch again"
        )
    with _locked(path):
        sums = read(path)
        if sums.setdefault(url, sha256) != sha256:  # another process recorded it meanwhile
            return check_or_record(url, sha256, path)
        lines = "".join(f"{sums[u]}  {u}\n" for u in sorted(sums))
        with atomic_path(path) as tmp:
            tmp.write_text(HEADER + lines, encoding="utf-8")
    return True
