"""Wire the MQTT channel from the runtime: the shared agent loop, registry, approvals, audit trail,
database, secrets and the custom tools' definition API."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from edgeclaw.channels.mqtt import MqttChannel
from edgeclaw.channels.mqtt.keys import Keys
from edgeclaw.daemon.fleet import install_fleet
from edgeclaw.daemon.runtime import Runtime
from edgeclaw.net.device_key import DeviceSigner
from edgeclaw.tools.runtime.custom import custom_tools_for

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from edgeclaw.agent.loop import AgentLoop
    from edgeclaw.tools.automation.targets import Delivery


log = logging.getLogger("edgeclaw.mqtt.peers")

PEER_KEYS_FILENAME = "peer-device-keys"  # DEVICE ed25519:BASE64 lines, as the fleet page's keys file


def attach_peers(runtime: Runtime, channel: MqttChannel) -> None:
    """The `nodes` tool's way to the other devices: a peer directory on the channel's connection,
    signing calls with this device's command key."""
    from edgeclaw.channels.mqtt.peers import PeerDirectory
    from edgeclaw.tools.nodes.tool import NodesTool

    tool = runtime.registry.get("nodes")
    if not isinstance(tool, NodesTool):
        return
    from edgeclaw.net.device_trust import DeviceKeys, DeviceKeysError

    try:
        keys = DeviceKeys(file=runtime.state_dir / PEER_KEYS_FILENAME)
    except DeviceKeysError as e:
        # Fail closed without stopping the device: no peer is trusted, so none is called.
        log.error("no peer can be verified or called until this is fixed: %s", e)
        keys = DeviceKeys(first_use=False)
    directory = PeerDirectory(
        channel.connection,
        channel.topics,
        command_secret=runtime.secrets.get("mqtt.hmac", ""),
        v5=runtime.config.mqtt.protocol == "5",
        # Each peer's key, pinned at first sight and kept across restarts (docs/mqtt.md#device-signatures).
        keys=keys,
        unsigned_peers=runtime.config.tools.nodes.unsigned_peers,
    )
    channel.extend(directory)
    tool.attach(directory)
    runtime.on_close(lambda: tool.attach(None, "the MQTT channel has stopped"))


def attach_sparkplug(runtime: Runtime, channel: MqttChannel) -> None:
    """The board as a Sparkplug B edge node: started and stopped with the channel, on a connection
    of its own (its NDEATH must be that connection's Will; the channel's Will is the status)."""
    from edgeclaw import __version__
    from edgeclaw.channels.mqtt.sparkplug import SparkplugNode

    try:
        from edgeclaw.channels.mqtt import sparkplug_payload  # noqa: F401  (protobuf, the extra)
    except ImportError as e:
        from edgeclaw.errors import ConfigError, ConfigErrors

        raise ConfigErrors(
            [
                ConfigError(
                    runtime.config._source,
                    "sparkplug.enabled",
                    f"Sparkplug B needs protobuf: pip install 'edgeclaw[sparkplug]' ({e})",
                )
            ]
        ) from None
    sp = runtime.config.sparkplug
    node = SparkplugNode(
        settings=channel.settings,
        group_id=sp.group_id,
        edge_node_id=sp.edge_node_id or runtime.device_id,
        state_dir=runtime.state_dir,
        profile=runtime.board,
        hardware=runtime.hardware,
        registry=runtime.registry,
        telemetry=channel.telemetry_snapshot,
        properties={"Board": runtime.board.name, "Version": __version__, "Device": runtime.device_id},
        data_interval_s=sp.data_interval_s,
        poll_s=sp.poll_s,
        primary_host_id=sp.primary_host_id,
    )
    channel.extend(node)


def agent_source(runtime: Runtime) -> Callable[[], AgentLoop]:
    """The shared agent loop for chats: built on the first one in `edgeclaw run`, at once elsewhere."""
    if runtime.agent.factory is not None:
        return runtime.agent.factory
    from edgeclaw.daemon.agent import shared_agent

    agent = shared_agent(runtime)
    return lambda: agent


def mqtt_service(runtime: Runtime) -> MqttChannel:
    """The MQTT channel as a daemon service (an async context manager)."""
    channel = MqttChannel(
        runtime.config.mqtt,
        device_id=runtime.device_id,
        board=runtime.board.name,
        registry=runtime.registry,
        approvals=runtime.approvals,
        db=runtime.db,
        agent_factory=agent_source(runtime),
        password=runtime.secrets.get("mqtt", ""),
        keys=Keys.from_config(runtime.config, runtime.secrets),  # [callers] and the legacy keys
        audit=runtime.audit,
        outlets=runtime.outlets,
        source=runtime.config._source,
        custom_tools=custom_tools_for(runtime.registry),
        # The retained status: config hash, firmware, sandbox, providers, MCP servers.
        status_facts=install_fleet(runtime),
        # The device's own key (state_dir/device.key): everything it publishes is signed with it.
        signer=DeviceSigner(runtime.state_dir, v5=runtime.config.mqtt.protocol == "5"),
    )
    # A deferred update, a confirmed trial: the retained status changes at once, not at the next telemetry.
    runtime.on_status_change(channel.reporter.refresh_status)
    attach_peers(runtime, channel)
    mqtt = runtime.config.mqtt
    if mqtt.discovery and mqtt.homeassistant_entities and runtime.hardware is not None:
        from edgeclaw import __version__
        from edgeclaw.admin.update_offer import offered_version, update_request
        from edgeclaw.channels.mqtt.homeassistant import HomeAssistantEntities

        connection = channel.connection
        state_dir = runtime.state_dir

        async def publish_state(topic: str, payload: bytes) -> None:
            await connection.publish(topic, payload, qos=1, retain=True)

        entities = HomeAssistantEntities(
            topics=channel.topics,
            profile=runtime.board,
            hardware=runtime.hardware,
            registry=runtime.registry,
            publish=publish_state,
            poll_s=mqtt.homeassistant_poll_s,
            refresh_s=mqtt.telemetry_interval_s,
            restart_button=mqtt.homeassistant_restart_button,
            offered=lambda: offered_version(state_dir, __version__),
            install=(lambda: update_request(state_dir)) if mqtt.homeassistant_update_install else None,
        )
        channel.extend(entities)
        channel.ha_components = entities.components
    if runtime.config.sparkplug.enabled:
        attach_sparkplug(runtime, channel)
    if runtime.mcp is not None:
        channel.collector.extra_sources["mcp"] = runtime.mcp.telemetry  # each MCP server's state
    if runtime.automation is not None:
        # Scheduled jobs' `mqtt:TOPIC` targets: published under the device while the channel runs.
        runtime.automation.outlets.register("mqtt", job_outlet(channel))
    return channel


def job_outlet(channel: MqttChannel) -> Callable[[str, Delivery], Awaitable[None]]:
    """A job's output on `{prefix}/{dev}/SUBTOPIC`, through the channel's store-and-forward sender like
    telemetry: kept while the broker is away (within the outbox bound), dropped first when full."""
    from edgeclaw.channels.mqtt.channel import ChannelNotRunning
    from edgeclaw.tools.automation.targets import DeliveryError, topic_problem

    async def publish(subtopic: str, delivery: Delivery) -> None:
        problem = topic_problem(subtopic)
        if problem is not None:
            raise DeliveryError(problem)
        try:
            channel.publish_under(subtopic, delivery.payload())
        except ChannelNotRunning as e:
            raise DeliveryError(str(e)) from None

    return publish
