"""Errors a user can meet: a one-line message with the fix, and no traceback.

Click prints a ClickException as `Error: <message>` and exits with its
exit_code, so every stage command gets this behaviour for free, a command module
that reads files at import too (`python -m pipeline` imports it inside click).
"""

import click


class UserError(click.ClickException):
    """A problem with the user's input (corpus, files, checkpoint): exit 1."""

    exit_code = 1


class ParamsError(UserError):
    """A bad key or value in params.yaml: exit 2, before anything is written."""

    exit_code = 2
