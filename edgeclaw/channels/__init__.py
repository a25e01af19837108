"""Channels: the only code that knows a wire (terminal, MQTT, serial console)."""
