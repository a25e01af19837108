"""The MQTT channel: chat and tool calls over MQTT 5, status and Last Will, telemetry, events,
Home Assistant discovery, approvals, and a store-and-forward outbox.

Modules, one concept each: `topics` (names), `connection` (client and reconnect loop),
`outbox` (SQLite store), `sender` (publish now or store, forward in order), `dedup`
(request ledger), `protocol` (payloads), `signing` (HMAC), `telemetry`, `discovery`,
`approvals`, and `channel` (the channel itself). The wire contract is in docs/mqtt.md.
"""

from edgeclaw.channels.mqtt.channel import MqttChannel

__all__ = ["MqttChannel"]
