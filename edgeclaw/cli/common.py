"""What every command shares: its exit statuses, the logging set-up, the config it runs on."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

EXIT_OK = 0
EXIT_TOOL_ERROR = 1
EXIT_REFUSED = 2  # refused before running, or a usage / configuration error
EXIT_WOULD_ASK = 3  # `tool call --dry-run`: the checks passed, but the call would ask a person first
EXIT_BROKEN_PIPE = 141  # what a shell reports for a program ended by SIGPIPE (128 + 13)


def setup_logging(level: str | None, default: str = "warning") -> None:
    logging.basicConfig(
        level=(level or default).upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def config_of(args: argparse.Namespace) -> Any:
    from edgeclaw.config.loader import load_config

    return load_config(getattr(args, "config", None))


def print_config_errors(err: Exception) -> None:
    print(f"edgeclaw: configuration error:\n{err}", file=sys.stderr)


def warn_missing_secrets(config: Any) -> None:
    """A secret the config names but this shell lacks: the service may get it from systemd, so warn only."""
    from edgeclaw.config.secrets import resolve_secrets

    for problem in resolve_secrets(config)[1]:
        print(f"warning: {problem}", file=sys.stderr)
