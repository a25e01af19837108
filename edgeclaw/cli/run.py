"""`edgeclaw run`: the daemon in the foreground, with an applied config or an update on trial
until it is healthy.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from edgeclaw.cli.common import config_of, setup_logging


def cmd_run(args: argparse.Namespace) -> int:
    from edgeclaw.admin.config_apply import ConfigTrial
    from edgeclaw.admin.logs import install_log_ring
    from edgeclaw.admin.restart import EXIT_RESTART, hang_guard, restart_in_place, supervised
    from edgeclaw.config.loader import find_config_path
    from edgeclaw.daemon.lifecycle import run_daemon
    from edgeclaw.errors import ConfigErrors

    path = find_config_path(args.config)
    # First which installed version runs (an update on trial, or one that must be rolled back):
    # this may run the current slot's edgeclaw in this process instead (os.execv).
    from edgeclaw.admin.update_slots import UpdateTrial, launch

    state_dir = _peek_state_dir(path)
    update_rolled_back = launch(state_dir, sys.argv[1:])
    update = UpdateTrial(state_dir)
    # A config applied through the gateway tool is on trial until the daemon is healthy on it.
    trial = ConfigTrial(path) if path is not None else None
    rolled_back = trial.before_start() if trial is not None else None
    ready = False

    decided = False

    def passed() -> None:
        nonlocal ready, decided
        ready = decided = True
        if trial is not None:
            _report_trial(trial.confirm())
        _report_update(update.confirm())

    def failed(why: str) -> None:
        nonlocal decided
        decided = True
        if trial is not None and trial.trying:
            trial.roll_back(why)
        update.roll_back(why)

    try:
        config = config_of(args)
        setup_logging(args.log_level, config.log_level)
        install_log_ring()
        if rolled_back:
            logging.getLogger("edgeclaw.gateway").error("the applied config was rolled back: %s", rolled_back)
        if update_rolled_back:
            logging.getLogger("edgeclaw.update").error("the update was rolled back: %s", update_rolled_back)
        # On trial, the daemon must be healthy by the deadline; a start that hangs is caught too.
        on_trial = (trial is not None and trial.trying) or update.trying
        deadline = config.gateway.health_deadline_s if on_trial else None
        window = config.gateway.health_window_s
        if deadline is not None:
            hang_guard(deadline + window, lambda: decided, failed)
        code = run_daemon(
            config,
            board=args.board,
            on_ready=passed,
            health_deadline_s=deadline,
            on_unhealthy=failed,
            health_window_s=window,
        )
    except (ConfigErrors, Exception) as e:
        config_on_trial = trial is not None and trial.trying
        if not (config_on_trial or update.trying) or ready:
            raise
        setup_logging(None, "info")
        why = f"{type(e).__name__}: {e}".splitlines()[0]
        if trial is not None and config_on_trial:
            trial.roll_back(why)
        update.roll_back(why)
        code = EXIT_RESTART
    if code == EXIT_RESTART and not supervised():
        restart_in_place()
    return code


def _peek_state_dir(path: Any) -> Any:
    """The state directory the config names (else the default), read without the full load: which
    installed version runs is settled before the config is."""
    import contextlib
    import tomllib
    from pathlib import Path

    from edgeclaw.config.paths import state_dir

    configured = ""
    if path is not None:
        with contextlib.suppress(OSError, ValueError):
            value = tomllib.loads(Path(path).read_text()).get("state_dir", "")
            configured = value if isinstance(value, str) else ""
    return state_dir(configured)


def _report_update(state: dict[str, Any] | None) -> None:
    if state is None:
        return
    log = logging.getLogger("edgeclaw.update")
    if state.get("state") == "applied":
        log.info("the update to %s is in force (healthy)", state.get("slot"))
    else:
        log.error("running on %s: the update to %s was rolled back (%s)", state.get("previous"),
                  state.get("slot"), state.get("reason"))  # fmt: skip


def _report_trial(state: dict[str, Any] | None) -> None:
    if state is None:
        return
    log = logging.getLogger("edgeclaw.gateway")
    if state.get("state") == "applied":
        log.info("the applied config is in force (changed: %s)", ", ".join(state.get("changed", [])))
    else:
        log.error("running on the previous config: the applied one was rolled back (%s)", state.get("reason"))
