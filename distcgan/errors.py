"""Error types that the entry point turns into one-line messages and exit codes.

A `UserError` means bad input or configuration: the message says what is wrong and how to fix it,
and the user sees it without a traceback. An `AgreedError` is a `UserError` that every rank raises
together (after a collective check), so exactly one rank prints it and no rank aborts the others.
"""

from __future__ import annotations

import sys


class UserError(Exception):
    """Bad input or configuration: reported as one line, exit code 2, no traceback."""


class AgreedError(UserError):
    """A UserError raised on every rank at the same point; `reporter` is the rank that prints it."""

    def __init__(self, message: str, reporter: int = 0) -> None:
        super().__init__(message)
        self.reporter = reporter


class ClassFailure(Exception):
    """Wraps an exception raised while one rank trained (or sampled) one class, to name both.

    `class_id` is a class id, the task's name for the one model of gan/cgan mode, or the
    classes of a fused group.
    """

    def __init__(self, class_id: int | str | tuple[int, ...], cause: BaseException) -> None:
        if isinstance(class_id, tuple):  # a fused group: the error is one of these classes'
            self.where = f"classes {', '.join(map(str, class_id))}, trained fused"
        else:
            self.where = f"class {class_id}" if isinstance(class_id, int) else f"task {class_id}"
        super().__init__(f"{self.where}: {type(cause).__name__}: {cause}")
        self.class_id = class_id
        self.cause = cause


def say(line: str) -> None:
    """One line on stderr in one write. print() writes the text and its newline apart, and an
    MPI launcher that forwards a rank's stderr may put its own output between the two (seen
    under Open MPI 4.1: our line ran into its frame of dashes)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
