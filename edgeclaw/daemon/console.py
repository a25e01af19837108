"""Wire the serial console from the runtime: settings from [console], the login gate, the shared agent."""

from __future__ import annotations

from pathlib import Path

from edgeclaw import __version__
from edgeclaw.channels.console.channel import ConsoleChannel, Endpoint
from edgeclaw.channels.console.login import LoginGate
from edgeclaw.channels.console.port import LineSettings
from edgeclaw.channels.console.session import Banner, SessionOptions
from edgeclaw.config.schema import ConsoleConfig
from edgeclaw.daemon.agent import shared_agent
from edgeclaw.daemon.runtime import Runtime
from edgeclaw.errors import ConfigError, ConfigErrors


def console_service(runtime: Runtime) -> ConsoleChannel:
    """The console channel for `edgeclaw run` (an async context manager, entered for the daemon's life)."""
    c = runtime.config.console
    source = runtime.config._source
    board = runtime.board
    return ConsoleChannel(
        shared_agent(runtime),
        c.ports,
        line=LineSettings(c.baud, c.parity, c.stop_bits, c.flow_control),
        banner=Banner(
            __version__,
            runtime.device_id,
            f"{board.name} ({board.description})" if board.description else board.name,
        ),
        options=SessionOptions(
            echo=c.echo,
            width=c.width,
            page_lines=c.page_lines,
            max_output_lines=c.max_output_lines,
            idle_logout_s=c.idle_logout_s,
            pace=c.pace,
        ),
        gate=login_gate(runtime, c, source),
        approvals=runtime.approvals,
        outlets=runtime.outlets,
        endpoints=llm_endpoints(runtime),
        reconnect_min_s=c.reconnect_min_s,
        reconnect_max_s=c.reconnect_max_s,
    )


def login_gate(runtime: Runtime, c: ConsoleConfig, source: str) -> LoginGate | None:
    """The gate when a hash is configured and login is not "off"; ConfigErrors for a bad hash file."""
    if c.login == "off":
        return None
    text, key = c.login_hash, "console.login_hash"
    if c.login_hash_file:
        key = "console.login_hash_file"
        try:
            text = Path(c.login_hash_file).read_text(encoding="utf-8").strip()
        except OSError as e:
            raise ConfigErrors(
                [ConfigError(source, key, f"cannot read {c.login_hash_file}: {e.strerror}")]
            ) from None
    if not text:
        return None
    from edgeclaw.config.pin_hash import PinHashError, parse_pin_hash  # hashlib, secrets: only with a gate

    try:
        pin_hash = parse_pin_hash(text)
    except PinHashError as e:
        raise ConfigErrors([ConfigError(source, key, str(e))]) from None
    # A hash of a short PIN can be searched offline: keep it out of anything a tool returns.
    runtime.registry.scrubber.add_secret(text)
    return LoginGate(
        pin_hash,
        max_failures=c.max_login_failures,
        lockout_s=c.lockout_s,
        failure_delay_s=c.login_delay_s,
        trail=runtime.audit,  # logins and lockouts in the log and, with MQTT, on `events`
    )


def llm_endpoints(runtime: Runtime) -> list[Endpoint]:
    """The configured providers, in chain order, with the URL each one calls."""
    from edgeclaw.agent.providers.endpoints import provider_url

    providers = runtime.config.providers
    return [
        Endpoint(name, providers[name].model, provider_url(providers[name]))
        for name in runtime.config.agent.providers
    ]
