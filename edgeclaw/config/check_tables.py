"""The config checks' tables: numeric ranges per key, the channels there are, serial rates.

A key whose check is "a number in this range" is one row of `RANGES` (or `PROVIDER_RANGES` for each
`[providers.NAME]`), checked by one loop; the message says what was expected in the same words for
every key.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple
from urllib.parse import urlsplit

KNOWN_CHANNELS = ("cli", "mqtt", "mqtt-admin", "console", "agent", "mcp", "homeassistant", "sparkplug")

# A check reports each problem as (dotted key, what was expected); the caller adds the file.
Fail = Callable[[str, str], None]

# The rates Linux serial drivers accept (the termios B* constants, as pyserial lists them).
SERIAL_BAUD_RATES = frozenset(
    (50, 75, 110, 134, 150, 200, 300, 600, 1200, 1800, 2400, 4800, 9600, 19200, 38400, 57600, 115200,
     230400, 460800, 500000, 576000, 921600, 1000000, 1152000, 1500000, 2000000, 2500000, 3000000,
     3500000, 4000000)
)  # fmt: skip


class Range(NamedTuple):
    """The numbers a key accepts: `low` (excluded when `above`) up to `high` (None = no limit)."""

    key: str  # dotted, also the attribute path into Config
    low: float
    high: float | None = None
    above: bool = False  # "> low" rather than ">= low"
    what: str = ""  # names the value in the message; default "an integer" / "a number" by its type
    note: str = ""  # appended to the expectation, e.g. " (0 = unlimited)"

    def problem(self, value: float) -> str | None:
        """What is wrong with `value`, or None when it is in range."""
        too_low = value <= self.low if self.above else value < self.low
        if not too_low and (self.high is None or value <= self.high):
            return None
        what = self.what or ("an integer" if isinstance(value, int) else "a number")
        low = plain(self.low)
        if self.high is not None:
            return f"expected {what} {low}-{plain(self.high)}, got {value}"
        return f"expected {what} {'>' if self.above else '>='} {low}{self.note}, got {value}"


def plain(bound: float) -> str:
    """A bound as a person writes it: 1048576, 0.1 (never 1.04858e+06)."""
    return str(int(bound)) if float(bound).is_integer() else str(bound)


# Every plain numeric bound of the schema, checked by one loop (check_ranges).
RANGES: tuple[Range, ...] = (
    Range("shutdown_grace_s", 0),
    Range("agent.max_iterations", 1),
    Range("agent.history_budget_tokens", 1),
    Range("agent.history_max_messages", 1),
    Range("agent.provider_attempts", 1),
    Range("agent.max_retry_after_s", 0),
    Range("tools.timeout_s", 0, above=True),
    Range("tools.rate_limit", 0, note=" (0 = no rate limits)"),
    Range("tools.rate_per_minute", 0, above=True),
    Range("tools.channel_rate_limit", 0, note=" (0 = no ceiling per channel)"),
    Range("tools.channel_rate_per_minute", 0, above=True),
    Range("tools.max_output_bytes", 1024),
    Range("tools.max_file_bytes", 1024),
    Range("tools.subagents.max_depth", 0),
    Range("tools.subagents.max_concurrent", 1),
    Range("tools.subagents.max_children", 1),
    Range("tools.subagents.max_iterations", 1),
    Range("tools.subagents.timeout_s", 0, above=True),
    Range("tools.subagents.archive_after_s", 0),
    Range("tools.subagents.announce_debounce_s", 0, 60),
    Range("tools.browser.idle_timeout_s", 0, above=True),
    Range("tools.browser.max_instances", 1),
    Range("tools.browser.load_timeout_s", 0, above=True),
    # chromium does not start in less; its pids cgroup counts threads, of which it has hundreds.
    Range("tools.browser.memory_mb", 64),
    Range("tools.browser.max_processes", 64),
    Range("hardware.op_timeout_s", 0, above=True),
    Range("hardware.flash_timeout_s", 0, above=True),
    Range("hardware.max_pulse_s", 0, above=True),
    Range("hardware.max_read_bytes", 1, 1 << 20),
    Range("state.backup_interval_s", 0, note=" (0 = no backups)"),
    Range("state.reserve_bytes", 0, note=" (0 = no reserve)"),
    Range("mqtt.port", 1, 65535, what="a port number"),
    Range("mqtt.keepalive_s", 5),
    Range("mqtt.max_payload_bytes", 256),
    Range("mqtt.inbound_queue", 1),
    Range("mqtt.max_concurrent", 1),
    Range("mqtt.outbox_max", 10),
    Range("mqtt.session_expiry_s", 0),
    Range("mqtt.connect_timeout_s", 0, above=True),
    Range("mqtt.telemetry_interval_s", 0),
    Range("mqtt.dedup_window_s", 0),
    Range("mqtt.resend_window_s", 0, note=" (0 = answers are never published again)"),
    Range("mqtt.resend_max_messages", 0, 1_000_000),
    Range("mqtt.resend_max_bytes", 0, 1 << 30),
    Range("mqtt.hmac_max_age_s", 0),
    Range("mqtt.homeassistant_poll_s", 0.1, 3600),
    Range("sparkplug.data_interval_s", 0.01, 86400),
    Range("sparkplug.poll_s", 0.01, 3600),
    Range("fleet_page.session_ttl_s", 1, 30 * 86400),
    Range("fleet_page.max_sessions", 1, 10000),
    Range("fleet_page.max_login_failures", 1),
    Range("fleet_page.lockout_s", 0),
    Range("fleet_page.history_s", 60, 7 * 86400),
    Range("fleet_page.history_retention_s", 60, 3660 * 86400),
    Range("fleet_page.max_devices", 1, 100000),
    Range("fleet_page.max_events", 10, 100000),
    Range("fleet_page.call_timeout_s", 1, 3600),
    Range("fleet_page.broadcast_wait_s", 0.1, 600),
    Range("console.max_login_failures", 1),
    Range("console.lockout_s", 0),
    Range("console.login_delay_s", 0),
    Range("console.idle_logout_s", 0),
    Range("console.page_lines", 0),
    Range("console.max_output_lines", 1),
    Range("console.reconnect_min_s", 0, above=True),
    Range("memory.embedding_batch", 1, 2048),
    Range("memory.embedding_timeout_s", 0, above=True),
    Range("memory.embedding_attempts", 1),
    Range("memory.embedding_cooldown_s", 0),
    Range("memory.chunk_tokens", 16, 4096),
    Range("memory.chunk_overlap_tokens", 0),
    Range("memory.max_document_bytes", 1024),
    Range("memory.daily_half_life_days", 0, note=" (0 = no fading)"),
    Range("memory.mmr_lambda", 0, 1),
    Range("memory.bootstrap_max_turns", 0, note=" (0 = only when the model empties it)"),
    Range("memory.prompt_chars", 0),
    Range("memory.prompt_memory_chars", 0),
    Range("skills.prompt_max", 0),
    Range("gateway.health_deadline_s", 5),
    Range("gateway.health_window_s", 0),
    Range("gateway.update_max_bytes", 1024),
    Range("gateway.update_chunk_bytes", 1024),
    Range("gateway.update_slots", 2),
    Range("gateway.update_defer_max_s", 1),
)
# The same for each [providers.NAME] table.
PROVIDER_RANGES = (
    Range("timeout_s", 0, above=True),
    Range("idle_timeout_s", 0, above=True),
    Range("max_tokens", 1),
    Range("context_tokens", 0, note=" (0 = ask the server)"),
)


def check_ranges(obj: Any, ranges: Iterable[Range], fail: Fail, prefix: str = "") -> None:
    """Report every value out of its range; `prefix` is prepended to keys for messages only."""
    for r in ranges:
        problem = r.problem(operator.attrgetter(r.key)(obj))
        if problem is not None:
            fail(prefix + r.key, problem)


def url_problem(url: str) -> str | None:
    """Why `url` cannot be a provider's base_url, or None. Caught here rather than mid-turn."""
    expected = "expected an http:// or https:// URL such as http://127.0.0.1:8080/v1"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0-65535
    except ValueError as e:
        return f"{expected}, got {url!r} ({e})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{expected}, got {url!r}"
    return None
