"""The client's errors: one exception with the exit code the CLI ends with, and the HTTP status if any.

ClientError (CliError in the CLI)   message, `code` (EXIT_FAILED 1, EXIT_USAGE 2, EXIT_UNREACHABLE 3,
                                    EXIT_AUTH 4) and `status` (the broker's HTTP status; None when it
                                    was not reached)
"""

from __future__ import annotations

__all__ = ["EXIT_AUTH", "EXIT_FAILED", "EXIT_UNREACHABLE", "EXIT_USAGE", "ClientError"]

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_AUTH = 4


class ClientError(Exception):
    """A failure to report as one line, with the process exit code (and the HTTP status, if answered)."""

    def __init__(self, message: str, code: int = EXIT_FAILED, status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
