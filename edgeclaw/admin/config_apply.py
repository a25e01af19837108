"""Applying a config through the gateway tool: checked, written with the previous file kept,
reloaded in place or restarted onto, and on trial until the daemon is healthy on it.

Applying a config, step by step:

1. The new text is checked as `config check` checks a file (TOML, types,
   ranges, names, the board profile); a problem refuses it, nothing written.
2. The running file is copied to `FILE.previous`, the new text written to
   `FILE.new`, fsync'd and renamed over `FILE` (a power cut leaves the old
   file or the new one, never half of one).
3. When only what can change at run time differs (the tool policy, the log
   level), it is reloaded in place. Anything else restarts the daemon, with
   `FILE.apply` saying a new file is on trial.
4. At the next start `ConfigTrial.before_start` marks the trial as running.
   Being healthy confirms it (the marker goes): READY, and connected to the
   broker when MQTT is on, within `gateway.health_deadline_s`. A start that
   fails (the file is refused, a channel cannot start), one that is not
   healthy by the deadline (the broker named cannot be reached, a start that
   hangs) restores `FILE.previous` and starts again; so does a start that
   finds the trial still running, which means the last one died before it
   was healthy (killed, out of memory, a crash).

A new file that weakens security (`WEAKENING`: the sandbox off, request signing off, a wider tool
policy for remote callers, a listener on a non-loopback address) is refused unless the request
names each weakened key in `acknowledge`: the everyday key that may apply a config must not be
able to take the device's defences down by accident or in passing. Every file applied is on the
audit trail with the keys it changed and the ones it weakened.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from edgeclaw.config.schema import Config
from edgeclaw.errors import ConfigErrors
from edgeclaw.store.durable import replace_durably

if TYPE_CHECKING:
    from edgeclaw.tools.audit import AuditTrail
    from edgeclaw.tools.registry import Registry


class ConfigHost(Protocol):
    """What applying a config reads and changes: the running config (its reloadable parts are
    replaced in place), the registry's policy and the audit trail."""

    @property
    def config(self) -> Config: ...
    @property
    def registry(self) -> Registry: ...
    @property
    def audit(self) -> AuditTrail: ...


log = logging.getLogger("edgeclaw.gateway")

# What a config change may touch and still be taken in without a restart.
RELOADABLE = frozenset({"log_level", "tools.profile", "tools.allow", "tools.deny", "tools.also_allow",
                        "tools.providers", "tools.channels", "tools.agents"})  # fmt: skip


# -- checking and rendering ------------------------------------------------------------------------
def validate_text(text: str, source: str) -> tuple[Config | None, list[str]]:
    """The config a text describes and every problem with it (`config check`'s checks)."""
    from edgeclaw.config.loader import config_from_dict

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        return None, [f"{source}: not valid TOML: {e}"]
    try:
        config = config_from_dict(data, source, text)
    except ConfigErrors as e:
        return None, [str(err) for err in e.errors]
    return config, []


def effective(config: Config, key: str) -> dict[str, Any]:
    from edgeclaw.config.render import render_effective
    from edgeclaw.tools.scrub import Scrubber

    text = Scrubber().scrub(render_effective(config, [f"effective configuration from {config._source}"]))
    if not key:
        return {"text": text}
    value: Any = tomllib.loads(text)
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            from edgeclaw.errors import ToolError

            raise ToolError(f"config_get: no key {key!r} in the effective configuration")
        value = value[part]
    shown = json.dumps(value, ensure_ascii=False, indent=1) if isinstance(value, dict | list) else str(value)
    return {"text": f"{key} = {shown}", "key": key, "value": value}


def changed_keys(old: Config, new: Config) -> list[str]:
    """Dotted keys (two levels deep) whose values differ."""
    a, b = dataclasses.asdict(old), dataclasses.asdict(new)
    out = []
    for top in sorted(set(a) | set(b)):
        if top.startswith("_"):
            continue
        x, y = a.get(top), b.get(top)
        if isinstance(x, dict) and isinstance(y, dict) and top not in ("providers", "agents"):
            out += [f"{top}.{k}" for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k)]
        elif x != y:
            out.append(top)
    return out


# -- what weakens security -------------------------------------------------------------------------
def _read(config: Config, key: str) -> Any:
    value: Any = config
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
    return value


def _becomes(weak: Any) -> Callable[[Any, Any], bool]:
    return lambda old, new: new == weak and old != weak


def _turned_on(old: Any, new: Any) -> bool:
    return bool(new) and not old


def _turned_off(old: Any, new: Any) -> bool:
    return bool(old) and not new


def _ranked(*order: str) -> Callable[[Any, Any], bool]:
    """Weaker when the new value comes later in `order` (from the strictest)."""
    return lambda old, new: old in order and new in order and order.index(new) > order.index(old)


def _fewer(old: Any, new: Any) -> bool:
    """A list (of denied tools, say) that lost an entry."""
    return bool(set(old or ()) - set(new or ()))


def _is_loopback(listen: str) -> bool:
    import ipaddress

    host = listen.rsplit(":", 1)[0] if ":" in listen else listen
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name, or "" (every address): reachable from elsewhere


def _listens_wider(old: Any, new: Any) -> bool:
    """A listener that now answers on an address other machines reach."""
    return bool(new) and new != old and not _is_loopback(str(new))


def _tools_admitted(profile: str, allow: list[str], default: str) -> set[str] | None:
    """What a policy step lets through (None = everything), by the names it lists."""
    from edgeclaw.config.policy_rules import BUILTIN_GROUPS, PROFILES

    if not (profile or allow):
        profile = default

    def expand(entries: Any) -> set[str] | None:
        if entries is None or "*" in entries:
            return None
        out: set[str] = set()
        for entry in entries:
            group = entry.removeprefix("group:")
            out |= set(BUILTIN_GROUPS.get(group, ())) if entry.startswith("group:") else set()
            out.add(entry)
        return out

    admitted = expand(PROFILES.get(profile, ())) if profile else None
    if allow:
        listed = expand(allow)
        admitted = listed if admitted is None else admitted if listed is None else admitted & listed
    return admitted


def _wider(before: set[str] | None, after: set[str] | None) -> bool:
    return before is not None and (after is None or bool(after - before))


def _profile_admits_more(old: Any, new: Any) -> bool:
    return _wider(_tools_admitted(old, [], ""), _tools_admitted(new, [], ""))


def _channel_admits_more(default: str) -> Callable[[Any, Any], bool]:
    """A channel's step ([tools.channels.NAME], absent: its built-in default) that lets more through."""

    def admitted(step: Any) -> set[str] | None:
        return _tools_admitted(step.profile if step else "", step.allow if step else [], default)

    return lambda old, new: _wider(admitted(old), admitted(new))


def _unsandboxed_servers(old: Any, new: Any) -> bool:
    """An MCP server (third-party code) that now runs on the host, outside the sandbox."""
    return any(not s.sandbox and (k not in old or old[k].sandbox) for k, s in (new or {}).items())


def _secret(section: str, name: str) -> Callable[[Config], Any]:
    """Whether a key is configured at all (from its variable or its file)."""
    return lambda c: bool(
        getattr(getattr(c, section), f"{name}_env") or getattr(getattr(c, section), f"{name}_file")
    )


# (key, how to read it from a config (None: the key's own value), weaker(old, new)). The key is what
# a request names in `acknowledge`. Add a row for each new setting that guards the device.
WEAKENING: tuple[tuple[str, Callable[[Config], Any] | None, Callable[[Any, Any], bool]], ...] = (
    ("sandbox.backend", None, _becomes("none")),
    ("sandbox.required", None, _turned_off),
    ("mqtt.hmac_secret", _secret("mqtt", "hmac_secret"), _turned_off),  # the command key
    ("mqtt.admin_secret", _secret("mqtt", "admin_secret"), _turned_off),  # the admin key
    ("mqtt.admin_unsigned", None, _turned_on),
    ("mqtt.broadcast_admin", None, _turned_on),
    ("tools.profile", None, _profile_admits_more),
    ("tools.deny", None, _fewer),
    ("tools.exec.security", None, _ranked("deny", "allowlist", "full")),
    ("tools.channels.mqtt", None, _channel_admits_more("remote")),
    ("tools.channels.mcp", None, _channel_admits_more("device")),
    ("mcp.server.listen", None, _listens_wider),
    ("mcp.servers", None, _unsandboxed_servers),
    ("fleet_page.listen", None, _listens_wider),
)


def weakened_keys(old: Config, new: Config) -> list[str]:
    """The `WEAKENING` keys whose new value is weaker than the running one."""
    out = []
    for key, read, weaker in WEAKENING:
        get = read or (lambda c, key=key: _read(c, key))
        if weaker(get(old), get(new)):
            out.append(key)
    return out


# -- the trial of a newly applied file ---------------------------------------------------------------
class ConfigTrial:
    """`FILE.apply`: a new config file on trial, and `FILE.previous` to go back to."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.marker = path.with_name(path.name + ".apply")
        self.previous = path.with_name(path.name + ".previous")
        self.state: dict[str, Any] | None = None

    def read(self) -> dict[str, Any] | None:
        try:
            value = json.loads(self.marker.read_text())
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def _write(self, state: dict[str, Any]) -> None:
        replace_durably(self.marker, json.dumps(state).encode())
        self.state = state

    def begin(self, by: str, changed: list[str]) -> None:
        self._write({"state": "pending", "at": time.time(), "by": by, "changed": changed})

    @property
    def trying(self) -> bool:
        return self.state is not None and self.state.get("state") == "trying"

    def before_start(self) -> str | None:
        """At start-up, before the file is read. Returns what was rolled back, if anything."""
        state = self.read()
        if state is None:
            return None
        if state.get("state") == "pending":
            self._write({**state, "state": "trying", "started": time.time()})
            return None
        if state.get("state") == "trying":
            return self.roll_back("the daemon did not come back after the new config was applied")
        return None  # "rolled_back": reported by `report`, kept until then

    def restore(self) -> None:
        replace_durably(self.path, self.previous.read_bytes())

    def roll_back(self, reason: str) -> str:
        if not self.previous.exists():
            log.error("config trial failed (%s) and there is no %s to go back to", reason, self.previous)
            self._write({"state": "rolled_back", "at": time.time(), "reason": reason, "restored": False})
            return reason
        replace_durably(self.path, self.previous.read_bytes())
        self._write({"state": "rolled_back", "at": time.time(), "reason": reason, "restored": True})
        log.error("the new config did not start (%s): %s restored from %s", reason, self.path, self.previous)
        return reason

    def confirm(self) -> dict[str, Any] | None:
        """READY: the trial passed (or a rollback is being reported). Returns the finished state."""
        state = self.read()
        if state is None:
            return None
        with contextlib.suppress(FileNotFoundError):
            self.marker.unlink()
        if state.get("state") == "trying":
            state["state"] = "applied"
        return state


def _replace_keeping_previous(trial: ConfigTrial, text: str) -> None:
    replace_durably(trial.previous, trial.path.read_bytes())
    replace_durably(trial.path, text.encode("utf-8"))


async def apply_config(
    runtime: ConfigHost, text: str, by: str, restart: Any, acknowledge: list[str] | tuple[str, ...] = ()
) -> dict[str, Any]:
    source = runtime.config._source
    if source.startswith("<"):
        return {
            "ok": False,
            "text": "this daemon runs on built-in defaults: there is no config file to replace "
            "(start it with --config FILE or $EDGECLAW_CONFIG)",
        }
    path = Path(source)
    new, problems = validate_text(text, source)
    if new is None:
        text = "the new config is refused; nothing was written:\n" + "\n".join(problems)
        return {"ok": False, "text": text, "problems": problems}
    changed = changed_keys(runtime.config, new)
    if not changed:
        return {
            "ok": True,
            "text": "the new config is the same as the running one: nothing to do",
            "changed": [],
        }
    weakened = weakened_keys(runtime.config, new)
    unacknowledged = [k for k in weakened if k not in acknowledge]
    if unacknowledged:
        runtime.audit.emit("config_apply", by=by, outcome="refused", changed=changed, weakened=weakened)
        return {
            "ok": False,
            "text": f"the new config weakens security ({', '.join(unacknowledged)}); nothing was written. "
            f'Send it again with "acknowledge": {json.dumps(weakened)} if that is intended',
            "changed": changed,
            "weakened": weakened,
        }
    trial = ConfigTrial(path)
    try:
        _replace_keeping_previous(trial, text)
    except OSError as e:
        return {"ok": False, "text": f"cannot write {path}: {e.strerror or e} (nothing changed)"}
    reloadable = all(k in RELOADABLE for k in changed)
    runtime.audit.emit(
        "config_apply", by=by, changed=changed, weakened=weakened, how="reload" if reloadable else "restart"
    )
    if reloadable:
        problem = _reload(runtime, new)
        if problem is not None:
            trial.restore()
            _reload(runtime, runtime.config)
            runtime.audit.emit("config_apply", by=by, outcome="rolled_back", reason=problem)
            return {"ok": False, "text": f"the new config could not be taken in ({problem}); "
                    f"{path} restored", "changed": changed}  # fmt: skip
        runtime.config.tools = new.tools
        runtime.config.log_level = new.log_level
        return {"ok": True, "text": f"applied and reloaded in place: {', '.join(changed)} (previous file "
                f"kept as {trial.previous})", "changed": changed, "how": "reload"}  # fmt: skip
    trial.begin(by, changed)
    asyncio.get_running_loop().call_later(0.2, restart, f"config applied by {by}")
    return {
        "ok": True,
        "text": f"written; restarting to take in {', '.join(changed)}. The previous file is kept as "
        f"{trial.previous} and restored if the daemon does not come back healthy",
        "changed": changed,
        "how": "restart",
    }


def _reload(runtime: ConfigHost, config: Config) -> str | None:
    """The policy and the log level from `config`, in place; a problem (unknown tool names) or None."""
    from edgeclaw.config.checks import policy_rules

    policy = runtime.registry.policy
    old = policy.rules
    policy.replace_rules(policy_rules(config))
    problems = policy.validate()
    if problems:
        policy.replace_rules(old)
        return "; ".join(f"{k}: {p}" for k, p in problems)
    logging.getLogger().setLevel(config.log_level.upper())
    return None
