"""Drives EMQX's MCP-over-MQTT client (its Python SDK, `mcp.client.mqtt`) against a broker, for
tests/test_mcp_emqx.py. Runs under the SDK's own interpreter (not ours): it imports neither
edgeclaw nor the tests. Prints one JSON line per event on stdout:

  {"event": "discovered", "server": NAME}
  {"event": "tools", "server": NAME, "names": [...]}
  {"event": "call", "server": NAME, "tool": T, "is_error": bool, "structured": {...}, "text": "..."}
  {"event": "offline", "server_id": ID, "server": NAME}     (the server's presence emptied)

usage: python emqx_mcp_driver.py PORT SERVER_NAME_FILTER TOOL ARGS_JSON
"""

from __future__ import annotations

import json
import sys

import anyio
import mcp.client.mqtt as mcp_mqtt
from mcp.shared.mqtt import MqttTransportBase

PORT, FILTER, TOOL, ARGS = int(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])


def say(**event: object) -> None:
    print(json.dumps(event), flush=True)


# The SDK refuses a CONNACK without `RetainAvailable: 1`. MQTT 5 (3.2.2.3.5) says an absent
# property means retain is available, and mosquitto leaves it out: take absence as the spec does.
_assert_property = MqttTransportBase.assert_property


def assert_property(self, properties, name, expected):  # type: ignore[no-untyped-def]
    if properties is not None and not hasattr(properties, name):
        return
    _assert_property(self, properties, name, expected)


MqttTransportBase.assert_property = assert_property  # type: ignore[method-assign]


class WatchingClient(mcp_mqtt.MqttTransportClient):
    def _handle_server_presence_message(self, msg) -> None:  # type: ignore[no-untyped-def]
        if not msg.payload:
            words = msg.topic.split("/")
            say(event="offline", server_id=words[2], server="/".join(words[3:]))
        super()._handle_server_presence_message(msg)


async def on_discovered(client, server_name):  # type: ignore[no-untyped-def]
    say(event="discovered", server=server_name)


async def on_connect(client, server_name, result):  # type: ignore[no-untyped-def]
    if result[0] != "ok":
        say(event="error", server=server_name, detail=str(result[1]))
        return
    listed = await client.list_tools(server_name)
    say(event="tools", server=server_name, names=sorted(t.name for t in listed.tools))
    called = await client.call_tool(server_name, name=TOOL, arguments=ARGS)
    text = " ".join(c.text for c in called.content if getattr(c, "type", "") == "text")
    say(
        event="call",
        server=server_name,
        tool=TOOL,
        is_error=called.isError,
        structured=called.structuredContent,
        text=text,
    )


async def main() -> None:
    async with WatchingClient(
        "edgeclaw-test",
        client_id="emqx-sdk-client",
        server_name_filter=FILTER,
        auto_connect_to_mcp_server=True,
        on_mcp_server_discovered=on_discovered,
        on_mcp_connect=on_connect,
        mqtt_options=mcp_mqtt.MqttOptions(host="127.0.0.1", port=PORT),
    ) as client:
        started = await client.start()
        if started is not True:
            say(event="error", detail=str(started))
            return
        await anyio.sleep(120)  # the test ends us


if __name__ == "__main__":
    anyio.run(main)
