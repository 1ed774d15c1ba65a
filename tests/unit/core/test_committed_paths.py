"""Committed files name no folder of the machine that wrote them: reports, run archives and docs use
paths relative to the repository (data/..., ../shared/corpora), which mean the same in every clone."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).parents[3]
MAX_BYTES = 5 * 1024 * 1024  # larger files are data, not text a person wrote or a report
BINARY = {".png", ".jpg", ".jpeg", ".gif", ".ico", ".pdf", ".pt", ".db", ".gz", ".tgz", ".zip", ".whl"}
# A machine's own folders: a checkout or mirror under /work, a home directory, pytest's temporary
# folders. Not after a letter, digit, dot or hyphen, so that a relative path such as `my/work/x` passes.
MACHINE_PATH = re.compile(
    r"(?<![\w.~-])(?:/work/|/root/|/home/[\w.-]+/|/Users/[\w.-]+/|/tmp/pytest|[A-Za-z]:\\Users\\)"
)


def tracked_files() -> list[Path]:
    """The files git tracks that exist in the working tree, this test itself left out (it spells the
    patterns)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=30
        ).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"not a git checkout ({e})")
    paths = (REPO / name for name in listed.decode("utf-8").split("\0") if name)
    me = Path(__file__).resolve()
    return [p for p in paths if p.is_file() and p.resolve() != me]


def text_of(path: Path) -> str | None:
    """The file's text, or None for a binary or an oversized file."""
    if path.suffix.lower() in BINARY or path.stat().st_size > MAX_BYTES:
        return None
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def test_no_committed_file_names_an_absolute_path_of_a_machine():
    found = []
    for path in tracked_files():
        text = text_of(path)
        if text is None or not MACHINE_PATH.search(text):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if MACHINE_PATH.search(line):
                found.append(f"{path.relative_to(REPO).as_posix()}:{number}: {line.strip()[:160]}")
    assert not found, (
        "absolute paths of a machine in committed files (write them relative to the repository, "
        "e.g. data/parents/x or ../shared/corpora):\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    "line",
    [
        "train.init_from: " + "/".join(("", "work", "main", "data", "parents", "ru-en")),
        '"parent": "/root/nmt/data/model"',
        "see /home/alice/corpora/x.tsv",
        "tmp: " + "/".join(("", "tmp", "pytest-of-root", "pytest-3", "test_x0")),
        "mirror=/Users/bob/shared/corpora",
    ],
)
def test_the_pattern_catches_a_machine_path(line: str):
    assert MACHINE_PATH.search(line)


@pytest.mark.parametrize(
    "line",
    [
        "data/parents/ru-en",
        "../shared/corpora",
        "my/work/notes",
        "--out /tmp/gpu",
        "https://example.org/home/x/",
    ],
)
def test_the_pattern_passes_relative_paths_and_urls(line: str):
    assert not MACHINE_PATH.search(line)
