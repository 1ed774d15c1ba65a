"""corpora.lock: a URL's first sum is recorded, later ones must match, the file stays sha256sum's format."""

from __future__ import annotations

import pytest

from pipeline.data import lock
from pipeline.errors import UserError

A, B = "a" * 64, "b" * 64


def test_the_first_sum_is_recorded_and_the_same_sum_again_changes_nothing(tmp_path):
    path = tmp_path / lock.LOCK_FILE
    assert lock.check_or_record("https://h/x.zip", A, path) is True
    assert lock.check_or_record("https://h/x.zip", A, path) is False
    assert lock.check_or_record("https://h/a.gz", B, path) is True
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    assert lines == [f"{B}  https://h/a.gz", f"{A}  https://h/x.zip"]  # sorted by URL, as sha256sum lists
    assert lock.read(path) == {"https://h/x.zip": A, "https://h/a.gz": B}


def test_another_sum_for_a_recorded_url_is_refused_naming_both_and_the_fix(tmp_path):
    path = tmp_path / lock.LOCK_FILE
    lock.check_or_record("https://h/x.zip", A, path)
    with pytest.raises(UserError) as refused:
        lock.check_or_record("https://h/x.zip", B, path)
    assert (
        A in refused.value.message
        and B in refused.value.message
        and "delete its line" in refused.value.message
    )
    assert lock.read(path) == {"https://h/x.zip": A}


def test_a_malformed_line_names_the_file_and_line(tmp_path):
    path = tmp_path / lock.LOCK_FILE
    path.write_text(f"# comment\n{A}  https://h/x.zip\nnot a sum\n")
    with pytest.raises(UserError, match=r"corpora.lock:3: expected `SHA256  URL`"):
        lock.read(path)
