"""The gateway tool's daemon side: config get/validate/apply with rollback, restart, logs, reload.

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

Restarting: under a supervisor (systemd: `INVOCATION_ID` is set; or
`EDGECLAW_SUPERVISED=1`) the daemon exits with status 75 and the
supervisor (the unit's `Restart=on-failure`) starts it again; otherwise it
runs itself again in place (`execv` of the same command line).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import logging
import os
import re
import shutil
import sys
import threading
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeclaw.config.schema import Config
from edgeclaw.errors import ConfigErrors
from edgeclaw.tools.automation.gateway import GatewayHooks

if TYPE_CHECKING:
    from edgeclaw.daemon.runtime import Runtime

log = logging.getLogger("edgeclaw.gateway")

EXIT_RESTART = 75  # EX_TEMPFAIL: "try again", which systemd's Restart=on-failure does
# What a config change may touch and still be taken in without a restart.
RELOADABLE = frozenset({"log_level", "tools.profile", "tools.allow", "tools.deny", "tools.also_allow",
                        "tools.providers", "tools.channels", "tools.agents"})  # fmt: skip
LOG_RING_LINES = 2000


def under_systemd(environ: dict[str, str] | os._Environ[str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return bool(env.get("INVOCATION_ID"))


def supervised(environ: dict[str, str] | os._Environ[str] | None = None) -> bool:
    """Something restarts the daemon when it exits non-zero: systemd, or what set EDGECLAW_SUPERVISED."""
    env = os.environ if environ is None else environ
    return under_systemd(env) or env.get("EDGECLAW_SUPERVISED") == "1"


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
        _atomic_write(self.marker, json.dumps(state).encode())
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
        _atomic_write(self.path, self.previous.read_bytes())

    def roll_back(self, reason: str) -> str:
        if not self.previous.exists():
            log.error("config trial failed (%s) and there is no %s to go back to", reason, self.previous)
            self._write({"state": "rolled_back", "at": time.time(), "reason": reason, "restored": False})
            return reason
        _atomic_write(self.path, self.previous.read_bytes())
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


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".new")
    mode = 0o600
    with contextlib.suppress(OSError):
        mode = path.stat().st_mode & 0o777
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dirfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)


def _replace_keeping_previous(trial: ConfigTrial, text: str) -> None:
    _atomic_write(trial.previous, trial.path.read_bytes())
    _atomic_write(trial.path, text.encode("utf-8"))


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


# -- logs --------------------------------------------------------------------------------------------
class LogRing(logging.Handler):
    """The daemon's last lines, for `gateway logs` when neither a journal nor a log file has them."""

    def __init__(self, size: int = LOG_RING_LINES) -> None:
        super().__init__()
        self.lines: collections.deque[str] = collections.deque(maxlen=size)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.lines.append(self.format(record))


_RING: LogRing | None = None


def install_log_ring() -> LogRing:
    global _RING
    if _RING is None:
        _RING = LogRing()
        logging.getLogger().addHandler(_RING)
    return _RING


def _systemd_unit() -> str | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            for part in reversed(line.split("/")):
                if part.endswith(".service"):
                    return part
    return None


LEVELS = ("debug", "info", "warning", "error", "critical")
_LEVEL_WORD = re.compile(r"\b(DEBUG|INFO|WARNING|ERROR|CRITICAL)\b")
# With a level filter, this many lines are read back to find `n` that pass it.
LOG_SCAN_LINES = 20000


def at_level(lines: list[str], level: str) -> list[str]:
    """The lines of records at `level` or above. A line without a level word (a traceback's, a
    message's second line) belongs to the record above it."""
    floor = LEVELS.index(level)
    kept: list[str] = []
    keep = False
    for line in lines:
        word = _LEVEL_WORD.search(line)
        if word is not None:
            keep = LEVELS.index(word.group(1).lower()) >= floor
        if keep:
            kept.append(line)
    return kept


async def read_logs(n: int, level: str | None = None) -> tuple[str, list[str]]:
    """The last `n` lines (of records at `level` or above): the journal under systemd, else stderr's
    file, else the in-process buffer."""
    if level is not None and level not in LEVELS:
        from edgeclaw.errors import ToolError

        raise ToolError(f"logs: unknown level {level!r} (expected one of: {', '.join(LEVELS)})")
    source, lines = await _read_lines(LOG_SCAN_LINES if level else n)
    if level is not None:
        lines = at_level(lines, level)
    return source, lines[-n:]


async def _read_lines(n: int) -> tuple[str, list[str]]:
    journalctl = shutil.which("journalctl")
    if under_systemd() and journalctl:
        unit = _systemd_unit()
        match = f"_SYSTEMD_UNIT={unit}" if unit else f"_SYSTEMD_INVOCATION_ID={os.environ['INVOCATION_ID']}"
        proc = await asyncio.create_subprocess_exec(
            journalctl, "-q", "--no-pager", "-o", "short-iso", "-n", str(n), match,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await proc.communicate()
        if proc.returncode == 0 and out.strip():
            return "journal", out.decode(errors="replace").splitlines()[-n:]
        log.info(
            "journalctl gave nothing (%s); using the other log sources", err.decode(errors="replace").strip()
        )
    with contextlib.suppress(OSError):
        target = Path(os.readlink("/proc/self/fd/2"))
        if target.is_absolute() and _is_file(target):
            return f"file {target}", _tail(target, n)
    if _RING is not None:
        return "memory", list(_RING.lines)[-n:]
    return "none", []


def _is_file(path: Path) -> bool:
    return path.is_file()


def _tail(path: Path, n: int, block: int = 65536) -> list[str]:
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        data = b""
        while size > 0 and data.count(b"\n") <= n:
            step = min(block, size)
            size -= step
            f.seek(size)
            data = f.read(step) + data
    return data.decode(errors="replace").splitlines()[-n:]


# -- the hooks -----------------------------------------------------------------------------------------
def offline_hooks(runtime: Runtime) -> GatewayHooks:
    """What the gateway tool can do in any process: read and check the config."""
    from edgeclaw.daemon.update import versions

    return GatewayHooks(
        config_get=lambda key: effective(runtime.config, key),
        config_validate=lambda text: validate_text(text, runtime.config._source)[1],
        slots=lambda: versions(runtime.state_dir),
    )


def attach_daemon(runtime: Runtime, hooks: GatewayHooks, status: Any, restart: Any) -> None:
    """The actions only a running daemon can take."""
    hooks.status = status
    hooks.restart = restart
    hooks.logs = read_logs
    hooks.reload_tools = lambda: reload_custom_tools(runtime)

    async def apply(text: str, by: str) -> dict[str, Any]:
        return await apply_config(runtime, text, by, restart)

    hooks.config_apply = apply

    async def update(args: dict[str, Any], by: str) -> dict[str, Any]:
        return await apply_update(runtime, args, by, restart)

    def chunk(args: dict[str, Any]) -> dict[str, Any]:
        from edgeclaw.daemon.update import store_chunk

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


async def apply_update(runtime: Runtime, args: dict[str, Any], by: str, restart: Any) -> dict[str, Any]:
    """A wheel by URL or from an upload: checked, installed in its slot, switched to, restarted onto."""
    from edgeclaw.daemon import update as updates
    from edgeclaw.errors import ToolError

    config = runtime.config.gateway
    url, upload, sha256 = args.get("url"), args.get("upload"), args.get("sha256")
    if not sha256:
        raise ToolError("update: give the wheel's sha256")
    if bool(url) == bool(upload):
        raise ToolError(
            "update: give either url (a wheel to download) or upload (one sent with update_chunk)"
        )
    if url:
        data, name = await updates.download(url, config)
    else:
        data, name = updates.assemble(runtime.state_dir, upload), None
    wheel = updates.check_wheel(data, sha256, name, config)
    signed = updates.check_signature(data, args.get("signature"), config)
    staged = await asyncio.to_thread(updates.stage, runtime.state_dir, wheel, by, config.update_slots)
    if upload:
        shutil.rmtree(runtime.state_dir / "updates" / upload, ignore_errors=True)
    runtime.audit.emit(
        "update", by=by, version=wheel.version, slot=wheel.slot, previous=staged["previous"], signed=signed
    )
    asyncio.get_running_loop().call_later(0.2, restart, f"update to {wheel.slot} by {by}")
    return {
        "ok": True,
        "text": f"edgeclaw {wheel.version} installed in slot {wheel.slot}; restarting onto it. It is "
        f"rolled back to {staged['previous']} unless it is healthy within {config.health_deadline_s:g} s",
        "how": "restart",
        "signed": signed,
        **staged,
    }


def reload_custom_tools(runtime: Runtime) -> dict[str, Any]:
    from edgeclaw.tools.runtime.custom import custom_tools_for

    custom = custom_tools_for(runtime.registry)
    if custom is None and runtime.mcp is not None:
        return retry_mcp_servers(runtime, {"text": "no custom tools here (the shell tools are off)"})
    if custom is None:
        from edgeclaw.errors import ToolError

        raise ToolError("custom tools are not available here (the shell tools are off)")
    stored = {row.name for row in custom.store().list()}
    gone = [s.name for s in custom.list() if s.source != "config" and s.name not in stored]
    for name in gone:
        custom.remove(name)
    loaded = custom.load_stored()
    text = f"custom tools reloaded: {len(loaded)} from the database" + (
        f", {len(gone)} removed" if gone else ""
    )
    runtime.audit.emit("admin", action="reload_tools", loaded=len(loaded), removed=len(gone))
    return retry_mcp_servers(runtime, {"text": text, "loaded": sorted(loaded), "removed": gone})


def retry_mcp_servers(runtime: Runtime, report: dict[str, Any]) -> dict[str, Any]:
    """The MCP servers that are not connected (a failed one included) are tried again now."""
    if runtime.mcp is None:
        return report
    retried = runtime.mcp.retry()
    if retried:
        runtime.audit.emit("admin", action="mcp_retry", servers=retried)
        report["text"] += f"; MCP servers tried again: {', '.join(retried)}"
    report["mcp_retried"] = retried
    return report


async def apply_config(runtime: Runtime, text: str, by: str, restart: Any) -> dict[str, Any]:
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
    trial = ConfigTrial(path)
    try:
        _replace_keeping_previous(trial, text)
    except OSError as e:
        return {"ok": False, "text": f"cannot write {path}: {e.strerror or e} (nothing changed)"}
    reloadable = all(k in RELOADABLE for k in changed)
    runtime.audit.emit("config_apply", by=by, changed=changed, how="reload" if reloadable else "restart")
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


def _reload(runtime: Runtime, config: Config) -> str | None:
    """The policy and the log level from `config`, in place; a problem (unknown tool names) or None."""
    from edgeclaw.config.loader import policy_rules

    policy = runtime.registry.policy
    old = policy.rules
    policy.replace_rules(policy_rules(config))
    problems = policy.validate()
    if problems:
        policy.replace_rules(old)
        return "; ".join(f"{k}: {p}" for k, p in problems)
    logging.getLogger().setLevel(config.log_level.upper())
    return None
