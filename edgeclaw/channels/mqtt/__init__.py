"""The MQTT channel: chat and tool calls over MQTT 5, status and Last Will, telemetry, events,
Home Assistant discovery, approvals, and a store-and-forward outbox.

Modules, one concept each: `topics` (names), `outbox` (SQLite store), `sender` (publish now or
store, forward in order), `resend` (answers the broker acknowledged lately, kept to resend), `dedup`
(request ledger), `protocol` (payloads), `inbound` (a command off the wire and understood), `keys`
(the keys and who the caller is), `reader` (a command parsed once), `serving` (admission, cancel,
one answer per request), `work` and `admin` (what a request does), `reporting` (status, discovery,
telemetry, events), `telemetry`, `discovery`, `approvals`, and `channel` (lifecycle and routing).
The connection and signing sit below the channels, in `edgeclaw.net`. The wire contract is in docs/mqtt.md.
"""

from edgeclaw.channels.mqtt.channel import MqttChannel

__all__ = ["MqttChannel"]
