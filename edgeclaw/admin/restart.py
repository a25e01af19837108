"""Restarting the daemon: by its supervisor, or by running itself again in place.

Under a supervisor (systemd: `INVOCATION_ID` is set; or
`EDGECLAW_SUPERVISED=1`) the daemon exits with status 75 and the
supervisor (the unit's `Restart=on-failure`) starts it again; otherwise it
runs itself again in place (`execv` of the same command line).

A start on trial (an applied config, an update) that hangs is caught here too (`hang_guard`).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable

log = logging.getLogger("edgeclaw.gateway")

EXIT_RESTART = 75  # EX_TEMPFAIL: "try again", which systemd's Restart=on-failure does


def under_systemd(environ: dict[str, str] | os._Environ[str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return bool(env.get("INVOCATION_ID"))


def supervised(environ: dict[str, str] | os._Environ[str] | None = None) -> bool:
    """Something restarts the daemon when it exits non-zero: systemd, or what set EDGECLAW_SUPERVISED."""
    env = os.environ if environ is None else environ
    return under_systemd(env) or env.get("EDGECLAW_SUPERVISED") == "1"


def restart_in_place() -> None:
    """Run this daemon's command line again in this process (not under a supervisor).

    A daemon running from an update slot restarts through the installation that launched it, so
    that the slot can be checked (and rolled back) again."""
    base = os.environ.get("EDGECLAW_BASE_PYTHON")
    if base and os.environ.get("EDGECLAW_SLOT"):
        os.environ.pop("EDGECLAW_SLOT")
        argv = [base, "-m", "edgeclaw", *sys.argv[1:]]
        log.warning("restarting through %s: %s", base, " ".join(argv))
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(base, argv)
    argv = [sys.executable, *sys.orig_argv[1:]]
    log.warning("restarting: %s", " ".join(argv))
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)


# A start on trial that gives no verdict (hangs before the health check can speak) gets this long past
# the deadline before the trial is rolled back from a thread and the process restarted.
HANG_GRACE_S = 30.0


def hang_guard(deadline_s: float, decided: Callable[[], bool], roll_back: Callable[[str], None]) -> None:
    """Past `deadline_s` and a grace with no verdict: roll back and restart, whatever the event loop
    is doing (a start stuck in a blocking call never reaches the health check)."""

    def fire() -> None:
        if decided():
            return
        why = f"no verdict within {deadline_s + HANG_GRACE_S:g} s: the start hung"
        log.error("%s; rolling back", why)
        roll_back(why)
        if supervised():
            os._exit(EXIT_RESTART)
        restart_in_place()

    timer = threading.Timer(deadline_s + HANG_GRACE_S, fire)
    timer.daemon = True
    timer.start()
