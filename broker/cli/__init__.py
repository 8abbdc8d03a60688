"""The `gpufed` command line: a client of the HTTP API, plus `serve` and `demo`."""

from broker.cli.commands import app, main, run

__all__ = ["app", "main", "run"]
