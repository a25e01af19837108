"""Every log record scrubbed before any handler sees it.

Log lines carry what went wrong, and what went wrong often quotes what came
back: a provider's error body echoing its key, an exception holding a URL with
a password, a command line. The journal keeps them, `journalctl` shows them to
every member of the `adm` group, and logs get shipped to fleets' collectors.

The hook is the log record factory rather than a handler's filter: it sees
every record of every logger (ours, httpx's, aiomqtt's) at creation, whatever
handlers are added later (systemd's journal, a test's capture), and a
logger-level `logging.Filter` would miss the records of child loggers. The
message is formatted once, scrubbed, and stored with no arguments left to
format; a traceback is formatted and scrubbed into `exc_text`.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

from edgeclaw.tools.scrub import Scrubber

__all__ = ["install_log_scrubbing", "scrub_record"]

# Every scrubber of a runtime alive in this process: a record is scrubbed by each. One in the
# daemon; tests build many runtimes, and a closed runtime's scrubber drops out with it.
_scrubbers: weakref.WeakSet[Scrubber] = weakref.WeakSet()
_lock = threading.Lock()
_installed = False
_formatter = logging.Formatter()


def install_log_scrubbing(scrubber: Scrubber) -> None:
    """Scrub every log record created from now on with `scrubber` (and any installed before)."""
    global _installed
    with _lock:
        _scrubbers.add(scrubber)
        if _installed:
            return
        previous = logging.getLogRecordFactory()

        def scrubbing_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            scrub_record(record)
            return record

        logging.setLogRecordFactory(scrubbing_factory)
        _installed = True


def scrub_record(record: logging.LogRecord) -> None:
    """Replace the record's message, traceback and stack with scrubbed text, in place."""
    scrubbers = list(_scrubbers)
    if not scrubbers:
        return

    def scrub(text: str) -> str:
        for scrubber in scrubbers:
            text = scrubber.scrub(text)
        return text

    try:
        message = record.getMessage()
    except Exception:
        # Arguments that do not fit the format: logging would print them raw in its error report.
        message = f"{record.msg!s} (log arguments did not fit the format)"
    record.msg = scrub(message)
    record.args = ()
    if record.exc_info:
        # Formatted now, so no handler formats the raw exception (whose message may hold a secret).
        record.exc_text = scrub(_formatter.formatException(record.exc_info))
        record.exc_info = None
    elif record.exc_text:
        record.exc_text = scrub(record.exc_text)
    if record.stack_info:
        record.stack_info = scrub(record.stack_info)
