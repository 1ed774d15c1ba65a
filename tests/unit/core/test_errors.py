"""pipeline/errors.py: what a user's mistake looks like: one line with the fix, no traceback."""

from __future__ import annotations

import pytest

from pipeline.errors import ParamsError, UserError, shown_at_import


def test_a_user_error_at_a_commands_import_is_one_line_and_its_exit_code(capsys) -> None:
    with pytest.raises(SystemExit) as exited, shown_at_import("__main__"):
        raise ParamsError("experiments/grid.yaml: lr: expected value labels")
    assert exited.value.code == 2
    assert capsys.readouterr().err == "Error: experiments/grid.yaml: lr: expected value labels\n"


def test_an_importer_gets_the_exception_and_other_errors_pass_through() -> None:
    with pytest.raises(UserError, match="bad recipe"), shown_at_import("pipeline.experiments.pairs"):
        raise UserError("bad recipe")
    with pytest.raises(KeyError), shown_at_import("__main__"):
        raise KeyError("a bug, not a user's mistake: its traceback stays")
