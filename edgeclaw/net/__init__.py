"""What the daemon and the fleet page share: the MQTT connection, command signing, the MQTT
contract's inbound JSON, and a small HTTP server.

Below the channels (it imports no channel, agent or tool), so `edgeclaw fleet serve` can speak the
MQTT contract without importing the daemon.
"""
