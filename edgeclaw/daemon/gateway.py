"""The gateway tool's hooks from the runtime: reading and checking the config in any process,
and the admin actions (edgeclaw.admin) only a running daemon can take.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edgeclaw.admin.config_apply import apply_config, effective, validate_text
from edgeclaw.admin.logs import read_logs
from edgeclaw.admin.tools_reload import reload_custom_tools
from edgeclaw.admin.update_slots import versions
from edgeclaw.tools.automation.gateway import GatewayHooks

if TYPE_CHECKING:
    from pathlib import Path

    from edgeclaw.admin.update_defer import UpdateDeferral
    from edgeclaw.config.schema import Config
    from edgeclaw.daemon.runtime import Runtime


def offline_hooks(config: Config, state_dir: Path) -> GatewayHooks:
    """What the gateway tool can do in any process: read and check the config."""
    return GatewayHooks(
        config_get=lambda key: effective(config, key),
        config_validate=lambda text: validate_text(text, config._source)[1],
        slots=lambda: versions(state_dir),
    )


def attach_daemon(runtime: Runtime, hooks: GatewayHooks, status: Any, restart: Any) -> None:
    """The actions only a running daemon can take."""
    hooks.status = status
    hooks.restart = restart
    hooks.logs = read_logs
    hooks.reload_tools = lambda: reload_custom_tools(runtime)

    async def apply(text: str, by: str, acknowledge: list[str]) -> dict[str, Any]:
        return await apply_config(runtime, text, by, restart, acknowledge)

    hooks.config_apply = apply

    from edgeclaw.admin.update_defer import UpdateDeferral

    deferral = UpdateDeferral(
        runtime.update_lock,
        runtime.state_dir,
        runtime.audit,
        lambda: runtime.config.gateway.update_defer_max_s,
    )
    deferral.on_change = runtime.status_changed  # deferred, applied, given up: the status at once
    runtime.on_close(deferral.aclose)
    resume_deferral(runtime, deferral, restart)

    async def update(args: dict[str, Any], by: str) -> dict[str, Any]:
        from edgeclaw.admin.update import apply_update  # checking and installing wheels: on first use

        return await apply_update(runtime, args, by, restart, deferral)

    def chunk(args: dict[str, Any]) -> dict[str, Any]:
        from edgeclaw.admin.update_upload import store_chunk

        return store_chunk(
            runtime.state_dir,
            runtime.config.gateway,
            args["upload"],
            args["index"],
            args["total"],
            args["data"],
        )

    hooks.update = update
    hooks.update_chunk = chunk

    def offer(args: dict[str, Any], by: str) -> dict[str, Any]:
        from edgeclaw import __version__
        from edgeclaw.admin.update_offer import offer_update

        report = offer_update(runtime.state_dir, args, by, __version__)
        runtime.audit.emit("update_offer", by=by, version=report["version"])
        return report

    hooks.offer_update = offer


def resume_deferral(runtime: Runtime, deferral: UpdateDeferral, restart: Any) -> None:
    """A deferred update an earlier run kept: taken over now (the status shows it from the first
    publish), checked again and waiting for the lock once the channels are up (its events reach
    them). Without one, a start reads the marker and nothing of the update code."""
    if deferral.kept_at_start() is None:
        return

    def resume() -> None:
        kept = deferral.left_to_resume()
        if kept is None or deferral.expire_if_late(kept):
            return  # replaced or superseded by an update since the start, or too late
        from edgeclaw.admin.update import resume_update

        resume_update(runtime, kept, restart, deferral)

    runtime.on_ready(resume)
