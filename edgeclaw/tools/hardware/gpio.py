"""`gpio`: the profile's named pins — list, read, write, pulse, PWM duty, wait for an edge.

Pins are addressed by number or by the name the profile gives them. Only
pins the profile grants exist here; only its `out` pins may be written or
pulsed, only those marked `pwm` may be given a duty cycle, and only `in`
pins are waited on.
"""

from __future__ import annotations

from typing import Any, ClassVar

from edgeclaw.board import GPIOPinGrant
from edgeclaw.errors import ToolRefused
from edgeclaw.tools.base import Args, ToolContext, ToolResult
from edgeclaw.tools.hardware.common import HardwareTool, result

WRITES = ("write", "pulse", "pwm")
EDGES = ("rising", "falling", "both", "active", "inactive")
# A wait stays inside the registry's default deadline for a call (tools.timeout_s, 60 s).
MAX_WAIT_MS = 50_000
MAX_DEBOUNCE_MS = 10_000
DEFAULT_DEBOUNCE_MS = 20


class GPIOTool(HardwareTool):
    name = "gpio"
    observing_actions = frozenset({"list", "read", "wait"})
    description = (
        "GPIO pins the board profile grants, by number or name. Actions: list, read, "
        "write (value true/false), pulse (active for duration_ms, then inactive), "
        "pwm (duty 0.0-1.0, optional frequency_hz), wait (for an edge on an input pin: edge "
        "rising/falling/both, or active/inactive for the logical state; timeout_ms; debounce_ms, "
        "default 20). Values are logical: an active-low button reads true when pressed."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["list", "read", "write", "pulse", "pwm", "wait"]},
            "pin": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "minLength": 1}]},
            "value": {"anyOf": [{"type": "boolean"}, {"type": "integer", "enum": [0, 1]}]},
            "duration_ms": {"type": "integer", "minimum": 1, "maximum": 600_000},
            "duty": {"type": "number", "minimum": 0, "maximum": 1},
            "frequency_hz": {"type": "number", "minimum": 1, "maximum": 100_000},
            "edge": {"type": "string", "enum": list(EDGES)},
            "timeout_ms": {"type": "integer", "minimum": 1, "maximum": MAX_WAIT_MS},
            "debounce_ms": {"type": "integer", "minimum": 0, "maximum": MAX_DEBOUNCE_MS},
        },
        "required": ["action"],
        "additionalProperties": False,
    }

    def _pin(self, args: Args) -> GPIOPinGrant:
        pin = args.get("pin")
        if pin is None:
            raise ToolRefused("argument 'pin' is required for this action")
        if isinstance(pin, str) and pin.isdigit():
            pin = int(pin)
        grant = self.profile.gpio_pin(pin)
        if grant is None:
            names = ", ".join(f"{g.pin} ({g.name})" for g in self.profile._spec.gpio) or "none"
            raise ToolRefused(
                f"GPIO {pin!r} is not granted by the {self.profile.name} profile (granted: {names})"
            )
        return grant

    async def check(self, args: Args, ctx: ToolContext) -> None:
        action = args["action"]
        if action == "list":
            return
        grant = self._pin(args)
        if action in WRITES and grant.direction != "out":
            raise ToolRefused(
                f"GPIO {grant.pin} ({grant.name}) is an input in the {self.profile.name} profile"
            )
        if action == "write" and "value" not in args:
            raise ToolRefused("argument 'value' is required for write")
        if action == "pulse":
            ms = args.get("duration_ms")
            if ms is None:
                raise ToolRefused("argument 'duration_ms' is required for pulse")
            if ms / 1000 > self.config.max_pulse_s:
                raise ToolRefused(f"duration_ms {ms} is over the {self.config.max_pulse_s:g} s pulse limit")
        if action == "wait":
            if grant.direction != "in":
                raise ToolRefused(
                    f"GPIO {grant.pin} ({grant.name}) is an output in the {self.profile.name} profile: "
                    "only input pins are waited on"
                )
            if "timeout_ms" not in args:
                raise ToolRefused("argument 'timeout_ms' is required for wait")
        elif any(k in args for k in ("edge", "timeout_ms", "debounce_ms")):
            raise ToolRefused("edge, timeout_ms and debounce_ms go with the wait action")
        if action == "pwm":
            if not grant.pwm:
                raise ToolRefused(
                    f"GPIO {grant.pin} ({grant.name}) is not granted PWM in the {self.profile.name} profile"
                )
            if "duty" not in args:
                raise ToolRefused("argument 'duty' is required for pwm")

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        action = args["action"]
        if action == "list":
            pins = [
                {"pin": g.pin, "name": g.name, "direction": g.direction, "pull": g.pull, "pwm": g.pwm}
                for g in self.profile._spec.gpio
            ]
            text = "\n".join(
                f"GPIO {p['pin']:>3} {p['name']:<16} {p['direction']}"
                + (" pwm" if p["pwm"] else "")
                + (f" pull-{p['pull']}" if p["pull"] != "none" else "")
                for p in pins
            )
            return result({"pins": pins}, text or "no GPIO pins granted")
        grant = self._pin(args)
        gpio = self.backends.gpio()
        if action == "wait":
            return await self._wait(grant, args)
        if action == "read":
            state = await gpio.read(grant.pin)
        elif action == "write":
            state = await gpio.write(grant.pin, bool(args["value"]))
        elif action == "pulse":
            state = await gpio.pulse(grant.pin, args["duration_ms"] / 1000)
        else:
            state = await gpio.pwm(grant.pin, float(args["duty"]), args.get("frequency_hz"))
        payload = {
            "pin": grant.pin,
            "name": grant.name,
            "active": state.active,
            "level": state.level,
            "value": state.value,
        }
        verb = {"read": "reads", "write": "now", "pulse": "pulsed, now", "pwm": "duty set, now"}[action]
        shown = f"duty {state.value:.3f}" if action == "pwm" else ("active" if state.active else "inactive")
        return result(payload, f"GPIO {grant.pin} ({grant.name}) {verb} {shown} (level {state.level})")

    async def _wait(self, grant: GPIOPinGrant, args: Args) -> ToolResult:
        wanted = args.get("edge", "both")
        timeout_s = args["timeout_ms"] / 1000
        debounce_ms = args.get("debounce_ms", DEFAULT_DEBOUNCE_MS)
        edge = await self.backends.gpio().wait_edge(grant.pin, wanted, timeout_s, debounce_ms / 1000)
        payload: dict[str, Any] = {
            "pin": grant.pin,
            "name": grant.name,
            "edge": wanted,
            "debounce_ms": debounce_ms,
            "seen": edge is not None,
        }
        if edge is None:
            which = "" if wanted == "both" else f"{wanted} "
            return result(payload, f"GPIO {grant.pin} ({grant.name}): no {which}edge within {timeout_s:g} s")
        payload.update(kind=edge.kind, level=edge.level, active=edge.active, at=round(edge.at, 3))
        return result(payload, f"GPIO {grant.pin} ({grant.name}): {edge.describe()}")
