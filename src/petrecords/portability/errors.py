"""The one failure of a data command: a line that names what failed, for the operator (exit status 1)."""

from __future__ import annotations


class CommandFailed(Exception):
    """What keeps a data command from completing; the target was left as it was."""


class UseAnotherTool(Exception):
    """The command does not apply to this database, and another tool does the job (exit status 2)."""
