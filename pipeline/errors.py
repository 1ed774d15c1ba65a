"""Errors a user can meet: a one-line message with the fix, and no traceback.

Click prints a ClickException as `Error: <message>` and exits with its
exit_code, so every stage command gets this behaviour for free; `shown_at_import`
gives it to a command module that reads files before click runs.
"""

import contextlib
from collections.abc import Iterator

import click


class UserError(click.ClickException):
    """A problem with the user's input (corpus, files, checkpoint): exit 1."""

    exit_code = 1


class ParamsError(UserError):
    """A bad key or value in params.yaml: exit 2, before anything is written."""

    exit_code = 2


@contextlib.contextmanager
def shown_at_import(module: str) -> Iterator[None]:
    """Around what a command module reads at import (its choices, say): a UserError is shown as
    click shows it, and exits, where the module runs as the command (`module` is "__main__");
    an importer gets the exception."""
    try:
        yield
    except UserError as e:
        if module != "__main__":
            raise
        e.show()
        raise SystemExit(e.exit_code) from None
