"""The Sparkplug B edge node, against a real mosquitto and real `edgeclaw run` daemons on the sim board.

Payloads are decoded by an independent decoder: Eclipse Tahu's npm package `sparkplug-payload`
under node, installed by the set-up into a cache directory outside the tree (skipped when node
or npm are missing: scripts/bootstrap --system installs them).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.protobuf")

from edgeclaw.channels.mqtt import sparkplug_payload as pb
from edgeclaw.channels.mqtt.sparkplug import BdSeq
from edgeclaw.config.loader import load_config
from edgeclaw.errors import ConfigErrors
from tests.fleet_support import FleetDaemon
from tests.mqtt_support import Caller, Mosquitto, Received, needs_mosquitto, poll
from tests.sensor_support import sensor_read_on_the_sim_board

NODE_CACHE = (
    Path(os.environ.get("EDGECLAW_TEST_CACHE", Path.home() / ".cache" / "edgeclaw-tests")) / "sparkplug-node"
)
GROUP = "plant"
SIM_TMP102_C = 21.5  # the sim TMP102's temperature (backends/sim/tmp102.py)

# Births are decoded as they are. A DATA message carries aliases without datatypes (Sparkplug 3.0 says
# they should not be repeated), and Tahu's decoder needs the datatype to find the value: so, as a
# host application does, the datatypes the births gave each alias are put back into the raw
# protobuf (Tahu's own) before Tahu's decoder reads it. Nothing of ours touches the bytes.
DECODE_JS = r"""
const sp = require('sparkplug-payload').get('spBv1.0');
const Raw = require('sparkplug-payload/lib/sparkplugPayloadProto').org.eclipse.tahu.protobuf.Payload;
const Long = require('long');
const lines = require('fs').readFileSync(0, 'utf8').split('\n').filter(Boolean);
const types = {};
const out = lines.map(l => {
  let bytes = Buffer.from(l, 'base64');
  const raw = Raw.decode(bytes);
  let filled = false;
  for (const m of raw.metrics) {
    const alias = m.alias == null ? null : Long.fromValue(m.alias).toString();
    if (m.datatype) { if (alias !== null) types[alias] = m.datatype; }
    else if (alias !== null && types[alias]) { m.datatype = types[alias]; filled = true; }
  }
  if (filled) bytes = Raw.encode(raw).finish();
  const decoded = sp.decodePayload(bytes);
  if (filled) decoded.metrics.forEach(m => { delete m.type; });  // what was sent: no datatype
  return decoded;
});
process.stdout.write(JSON.stringify(out, (k, v) =>
  v && typeof v === 'object' && 'low' in v && 'high' in v ? Long.fromValue(v).toString() : v));
"""


@pytest.fixture(scope="session")
def decode() -> Any:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed for the Sparkplug decoder (scripts/bootstrap --system)")
    if not (NODE_CACHE / "node_modules" / "sparkplug-payload").is_dir():
        NODE_CACHE.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(NODE_CACHE), "sparkplug-payload@1"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            pytest.skip(f"npm could not install sparkplug-payload: {done.stderr[-500:]}")

    def run(payloads: list[bytes]) -> list[dict[str, Any]]:
        text = "".join(base64.b64encode(p).decode() + "\n" for p in payloads)
        done = subprocess.run(
            [node, "-e", DECODE_JS], input=text, capture_output=True, text=True, cwd=NODE_CACHE, check=True
        )
        return json.loads(done.stdout)

    return run


def metrics(decoded: dict[str, Any], births: list[dict[str, Any]] = ()) -> dict[str, Any]:
    """The metrics by name; in a DATA message (aliases only) by the name `births` gave each alias."""
    names = {m["alias"]: m["name"] for b in births for m in b.get("metrics", []) if "alias" in m}
    return {m.get("name") or names[m["alias"]]: m for m in decoded.get("metrics", [])}


def value(decoded: dict[str, Any], name: str) -> Any:
    return metrics(decoded)[name]["value"]


def ncmd(**values: tuple[int, Any]) -> bytes:
    payload = pb.Payload(timestamp=1)
    for name, (datatype, v) in values.items():
        pb.set_value(payload.metrics.add(name=name), datatype, v)
    return payload.SerializeToString()


def topic(kind: str, node: str, device: str | None = None) -> str:
    return f"spBv1.0/{GROUP}/{kind}/{node}" + ("" if device is None else f"/{device}")


def sequenced(caller: Caller, node: str) -> list[Received]:
    """What counts in seq, in the order it arrived: everything of the node but NDEATH."""
    kinds = ("NBIRTH", "NDATA", "DBIRTH", "DDATA")
    return [r for r in caller.received if r.topic.split("/")[2] in kinds and r.topic.split("/")[3] == node]


def sparkplug_daemon(tmp_path: Path, name: str, port: int, *, extra: str = "", **sp: Any) -> FleetDaemon:
    settings = {"enabled": True, "group_id": GROUP, "poll_s": 0.1, "data_interval_s": 3600.0, **sp}
    table = "[sparkplug]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
    return FleetDaemon(tmp_path / name, name, port, extra=table + extra, telemetry_interval_s=0.0)


@contextlib.contextmanager
def node_on_a_broker(tmp_path: Path, name: str, **sp: Any) -> Iterator[tuple[Mosquitto, FleetDaemon]]:
    """A mosquitto of its own and a daemon that is a Sparkplug node `name` on it, stopped after."""
    broker = Mosquitto(tmp_path / "broker").start()
    daemon = sparkplug_daemon(tmp_path, name, broker.port, **sp).start()
    try:
        yield broker, daemon
    finally:
        daemon.stop()
        broker.stop()


def on(caller: Caller, kind: str, node: str) -> list[Received]:
    return caller.on(topic(kind, node))


# -- payload encoding, checked by the independent decoder ----------------------------------------


def test_payload_types_read_back_by_the_tahu_decoder(decode):
    payload = pb.Payload(timestamp=1_700_000_000_123, seq=7)
    for name, datatype, v in (
        ("i32", pb.INT32, -3),
        ("i64", pb.INT64, -5),
        ("u64", pb.UINT64, 2**40),
        ("f", pb.FLOAT, 21.5),
        ("d", pb.DOUBLE, 0.1),
        ("b", pb.BOOLEAN, True),
        ("s", pb.STRING, "sim"),
        ("n", pb.DOUBLE, None),
    ):
        pb.set_value(payload.metrics.add(name=name), datatype, v)
    [got] = decode([payload.SerializeToString()])
    assert got["timestamp"] == "1700000000123" and got["seq"] == "7"
    m = metrics(got)
    assert [m[k]["type"] for k in ("i32", "i64", "u64", "f", "d", "b", "s")] == [
        "Int32", "Int64", "UInt64", "Float", "Double", "Boolean", "String",
    ]  # fmt: skip
    assert m["i32"]["value"] == -3 and m["i64"]["value"] == "-5" and m["u64"]["value"] == str(2**40)
    assert m["f"]["value"] == 21.5 and m["d"]["value"] == 0.1 and m["b"]["value"] is True
    assert m["s"]["value"] == "sim" and m["n"]["value"] is None
    # And ours reads its own signed values back the same.
    back = pb.Payload.FromString(payload.SerializeToString())
    assert [pb.get_value(x) for x in back.metrics][:2] == [-3, -5]


def test_bdseq_persists_and_wraps(tmp_path):
    path = tmp_path / "sparkplug" / "bdseq"
    first = BdSeq(path)
    assert [first.next(), first.next()] == [0, 1]
    again = BdSeq(path)  # a restart
    assert again.next() == 2
    path.write_text("255\n")
    assert BdSeq(path).next() == 0
    path.write_text("not a number\n")
    assert BdSeq(path).next() == 0


def test_config_refuses_bad_ids_and_sparkplug_without_mqtt(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[mqtt]\nenabled = true\n[sparkplug]\nenabled = true\ngroup_id = "a/b"\nedge_node_id = "x+"\n'
    )
    with pytest.raises(ConfigErrors) as e:
        load_config(bad, environ={})
    text = str(e.value)
    assert "sparkplug.group_id" in text and "sparkplug.edge_node_id" in text
    lonely = tmp_path / "lonely.toml"
    lonely.write_text("[sparkplug]\nenabled = true\n")
    with pytest.raises(ConfigErrors) as e:
        load_config(lonely, environ={})
    assert "mqtt.enabled" in str(e.value)


# -- a real daemon -------------------------------------------------------------------------------


@needs_mosquitto
async def test_birth_death_and_bdseq_across_restarts(tmp_path, decode):
    broker = Mosquitto(tmp_path / "broker").start()
    daemon = sparkplug_daemon(tmp_path, "spb-1", broker.port).start()
    try:
        async with Caller(broker.port, ["spBv1.0/#"]) as c:
            births = await c.answers(topic("NBIRTH", "spb-1"), 1)
            [birth] = decode([births[0].payload])
            assert birth["seq"] == "0" and value(birth, "bdSeq") == "0"
            m = metrics(birth)
            assert m["bdSeq"]["type"] == "Int64"
            assert m["GPIO/led"] == {**m["GPIO/led"], "type": "Boolean", "value": False}
            assert m["GPIO/button"]["value"] is False  # not pressed
            temp = m["Sensors/board temperature/Temperature"]
            assert temp["type"] == "Double" and temp["value"] == pytest.approx(SIM_TMP102_C)
            assert temp["properties"]["engUnit"]["value"] == "°C"
            # Every value of every declared device, in its unit, as `sensor read` gives it.
            assert m["Sensors/air/Humidity"]["properties"]["engUnit"]["value"] == "%RH"
            assert m["Sensors/adc/Voltage ch2"]["properties"]["engUnit"]["value"] == "V"
            assert m["Sensors/solar/Bus Voltage"]["properties"]["engUnit"]["value"] == "V"
            printed = sensor_read_on_the_sim_board()
            words = {
                p: p.quantity.replace("_", " ").title() + (f" {p.label}" if p.label else "") for p in printed
            }
            expected = {f"Sensors/{p.device}/{words[p]}": p for p in printed}
            assert {n for n in m if n.startswith("Sensors/")} == set(expected)
            for name, p in expected.items():
                assert m[name]["properties"]["engUnit"]["value"] == p.unit, name
                assert m[name]["value"] == pytest.approx(p.value, abs=0.5), name
            # Each data metric has an alias, unique across the node and its devices.
            aliases = [x["alias"] for x in birth["metrics"] if "alias" in x]
            assert len(aliases) == len(set(aliases)) and m["GPIO/led"].get("alias")
            assert m["Node Control/Rebirth"]["value"] is False and m["Node Control/Reboot"]["value"] is False
            assert m["Tools/calls"]["type"] == "UInt64"
            assert m["Health/uptime_s"]["type"] == "Double" and m["Health/uptime_s"]["value"] >= 0
            assert m["Properties/Board"]["value"] == "sim"
            assert not births[0].retain
            # The devices the sim board names follow, seq going on: the ESP32 bridge and the probe.
            [esp] = decode([(await c.answers(topic("DBIRTH", "spb-1", "esp32"), 1))[0].payload])
            [probe] = decode([(await c.answers(topic("DBIRTH", "spb-1", "probe"), 1))[0].payload])
            assert sorted([esp["seq"], probe["seq"]]) == ["1", "2"]
            e = metrics(esp)
            assert e["GPIO/esp-led"]["type"] == "Boolean" and e["GPIO/esp-led"]["value"] is False
            assert e["ADC/soil-moisture/Millivolts"] == {
                **e["ADC/soil-moisture/Millivolts"],
                "type": "Int32",
                "value": 1650,
            }
            assert e["Properties/Port"]["value"] == "sim"
            assert e["Properties/Firmware"]["value"].startswith("edgeclaw-esp32")  # shaken hands by the reads
            assert value(probe, "Properties/Target").startswith("STM32F100RB")

            # Killed: the broker sends the Will, an NDEATH with the NBIRTH's bdSeq.
            daemon.kill()
            deaths = await c.answers(topic("NDEATH", "spb-1"), 1)
            assert value(decode([deaths[0].payload])[0], "bdSeq") == "0"
            assert "seq" not in decode([deaths[0].payload])[0]

            # Restarted: the next bdSeq, read from the state directory.
            daemon.start()
            births = await c.answers(topic("NBIRTH", "spb-1"), 2)
            assert value(decode([births[1].payload])[0], "bdSeq") == "1"

            # Stopped cleanly: no Will from the broker, so the node publishes the NDEATH itself.
            daemon.stop()
            deaths = await c.answers(topic("NDEATH", "spb-1"), 2)
            assert value(decode([deaths[1].payload])[0], "bdSeq") == "1"
            assert len(on(c, "NDEATH", "spb-1")) == 2
    finally:
        daemon.stop()
        broker.stop()


@needs_mosquitto
async def test_rebirth_and_a_metric_write_toggling_the_led(tmp_path, decode):
    broker = Mosquitto(tmp_path / "broker").start()
    daemon = sparkplug_daemon(tmp_path, "spb-2", broker.port).start()
    try:
        async with Caller(broker.port, ["spBv1.0/#"]) as c:
            await c.answers(topic("NBIRTH", "spb-2"), 1)
            await c.publish(
                topic("NCMD", "spb-2"), ncmd(**{"Node Control/Rebirth": (pb.BOOLEAN, True)}), qos=0
            )
            births = await c.answers(topic("NBIRTH", "spb-2"), 2)
            first, second = decode([b.payload for b in births])
            assert second["seq"] == "0" and value(second, "bdSeq") == value(first, "bdSeq")

            await c.publish(topic("NCMD", "spb-2"), ncmd(**{"GPIO/led": (pb.BOOLEAN, True)}), qos=0)

            def led_on() -> Any:
                for d in decode([births[0].payload, *(r.payload for r in on(c, "NDATA", "spb-2"))])[1:]:
                    if metrics(d, [first]).get("GPIO/led", {}).get("value") is True:
                        return d
                return None

            data = await poll(led_on, 20, "an NDATA with GPIO/led true")
            # After the birth, only the alias and the value: no name, no datatype.
            assert all("name" not in x and "type" not in x for x in data["metrics"]), data
            assert data["seq"] == "3"  # after the rebirth's NBIRTH (0) and its two DBIRTHs
            # Read back from the board, not echoed: a fresh NBIRTH says the same.
            await c.publish(
                topic("NCMD", "spb-2"), ncmd(**{"Node Control/Rebirth": (pb.BOOLEAN, True)}), qos=0
            )
            births = await c.answers(topic("NBIRTH", "spb-2"), 3)
            assert value(decode([births[2].payload])[0], "GPIO/led") is True
            # A read-only metric and one of the wrong type: nothing runs, nothing changes.
            await c.publish(
                topic("NCMD", "spb-2"),
                ncmd(**{"GPIO/button": (pb.BOOLEAN, True), "GPIO/led": (pb.STRING, "off")}),
                qos=0,
            )
            await asyncio.sleep(1.0)
            assert len([d for d in decode([r.payload for r in on(c, "NDATA", "spb-2")])]) == 1
    finally:
        daemon.stop()
        broker.stop()
    assert "is no writable metric" in daemon.log.read_text()


@needs_mosquitto
async def test_metric_writes_and_reboot_go_through_the_policy(tmp_path, decode):
    broker = Mosquitto(tmp_path / "broker").start()
    # The operator narrowed the channel: no gpio for Sparkplug.
    daemon = sparkplug_daemon(
        tmp_path, "spb-3", broker.port, extra='[tools.channels.sparkplug]\nprofile = "minimal"\n'
    ).start()
    try:
        async with Caller(broker.port, ["spBv1.0/#"]) as c:
            await c.answers(topic("NBIRTH", "spb-3"), 1)
            await c.publish(topic("NCMD", "spb-3"), ncmd(**{"GPIO/led": (pb.BOOLEAN, True)}), qos=0)
            await poll(lambda: "NCMD gpio refused" in daemon.log.read_text(), 20, "the LED write refused")
            await c.publish(
                topic("NCMD", "spb-3"), ncmd(**{"Node Control/Rebirth": (pb.BOOLEAN, True)}), qos=0
            )
            births = await c.answers(topic("NBIRTH", "spb-3"), 2)
            assert value(decode([births[1].payload])[0], "GPIO/led") is False  # the LED stayed off
            # Reboot: gateway is not in the channel's profile either.
            await c.publish(
                topic("NCMD", "spb-3"), ncmd(**{"Node Control/Reboot": (pb.BOOLEAN, True)}), qos=0
            )
            await poll(lambda: "NCMD gateway refused" in daemon.log.read_text(), 20, "the reboot refused")
            await asyncio.sleep(0.5)
            assert daemon.running and not on(c, "NDEATH", "spb-3")
            assert len(on(c, "NBIRTH", "spb-3")) == 2
    finally:
        daemon.stop()
        broker.stop()


@needs_mosquitto
async def test_reboot_restarts_the_daemon_when_the_policy_admits_gateway(tmp_path, decode):
    broker = Mosquitto(tmp_path / "broker").start()
    daemon = sparkplug_daemon(
        tmp_path, "spb-4", broker.port, extra='[tools.channels.sparkplug]\nallow = ["gpio", "gateway"]\n'
    ).start()
    try:
        async with Caller(broker.port, ["spBv1.0/#"]) as c:
            await c.answers(topic("NBIRTH", "spb-4"), 1)
            await c.publish(
                topic("NCMD", "spb-4"), ncmd(**{"Node Control/Reboot": (pb.BOOLEAN, True)}), qos=0
            )
            deaths = await c.answers(topic("NDEATH", "spb-4"), 1, within=30)
            births = await c.answers(topic("NBIRTH", "spb-4"), 2, within=30)
            assert value(decode([deaths[0].payload])[0], "bdSeq") == "0"
            assert value(decode([births[1].payload])[0], "bdSeq") == "1"
    finally:
        daemon.stop()
        broker.stop()


@needs_mosquitto
async def test_ndata_on_the_interval_with_seq_wrapping(tmp_path, decode):
    broker = Mosquitto(tmp_path / "broker").start()
    daemon = sparkplug_daemon(tmp_path, "spb-5", broker.port, data_interval_s=0.01).start()
    try:
        async with Caller(broker.port, ["spBv1.0/#"]) as c:
            await c.answers(topic("NBIRTH", "spb-5"), 1)
            await c.answers(topic("NDATA", "spb-5"), 120, within=60)
            data = sequenced(c, "spb-5")
    finally:
        daemon.stop()
        broker.stop()
    decoded = decode([d.payload for d in data])
    seqs = [int(d["seq"]) for d in decoded]
    assert seqs[:4] == [0, 1, 2, 3]  # NBIRTH, the DBIRTHs, then data
    assert len(seqs) > 300
    assert all(b == (a + 1) % 256 for a, b in itertools.pairwise(seqs)), seqs
    assert 255 in seqs and seqs[seqs.index(255) + 1] == 0
    # Everything on the interval: health figures as well as the rest.
    ndata = [d for r, d in zip(data, decoded, strict=True) if "/NDATA/" in r.topic]
    assert {"Health/uptime_s", "GPIO/led", "Tools/calls"} <= set(metrics(ndata[0], decoded[:1]))


def test_a_daemon_without_protobuf_says_which_extra_it_needs(tmp_path):
    daemon = sparkplug_daemon(tmp_path, "spb-np", 1)
    # As on a board where the extra is not installed: the import of protobuf fails.
    code = (
        "import sys; sys.modules['google.protobuf'] = None; from edgeclaw.cli.main import main; "
        "sys.exit(main(['run', '--board', 'sim']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=daemon.env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "sparkplug.enabled" in done.stderr and "edgeclaw[sparkplug]" in done.stderr


@needs_mosquitto
async def test_dcmd_writes_the_esp32_led_when_the_policy_admits_esp32(tmp_path, decode):
    broker = Mosquitto(tmp_path / "broker").start()
    narrow = sparkplug_daemon(tmp_path, "spb-6", broker.port).start()  # the default: gpio only
    wide = sparkplug_daemon(
        tmp_path, "spb-7", broker.port, extra='[tools.channels.sparkplug]\nallow = ["gpio", "esp32"]\n'
    ).start()
    led = ncmd(**{"GPIO/esp-led": (pb.BOOLEAN, True)})
    try:
        async with Caller(broker.port, ["spBv1.0/#"]) as c:
            for node in ("spb-6", "spb-7"):
                await c.answers(topic("DBIRTH", node, "esp32"), 1)
                await c.publish(topic("DCMD", node, "esp32"), led, qos=0)

            def lit(node: str) -> Any:
                messages = [*c.on(topic("DBIRTH", node, "esp32"))[:1], *c.on(topic("DDATA", node, "esp32"))]
                birth, *data = decode([r.payload for r in messages])
                for d in data:
                    if metrics(d, [birth]).get("GPIO/esp-led", {}).get("value") is True:
                        return d
                return None

            await poll(lambda: lit("spb-7"), 20, "a DDATA with the ESP32 LED on")
            await poll(lambda: "NCMD esp32 refused" in narrow.log.read_text(), 20, "the narrow node refusing")
            assert lit("spb-6") is None
            # A device this node does not have: nothing runs.
            await c.publish(topic("DCMD", "spb-7", "nothing"), led, qos=0)
            await poll(lambda: "has no device 'nothing'" in wide.log.read_text(), 20, "the unknown device")
    finally:
        narrow.stop()
        wide.stop()
        broker.stop()


@needs_mosquitto
async def test_births_wait_for_the_primary_host_and_follow_its_state(tmp_path, decode):
    state = "spBv1.0/STATE/scada"
    with node_on_a_broker(tmp_path, "spb-8", primary_host_id="scada", data_interval_s=0.2) as (
        broker,
        daemon,
    ):
        async with Caller(broker.port, ["spBv1.0/#"]) as c:
            await poll(lambda: "waits for the primary host scada" in daemon.log.read_text(), 30, "waiting")
            await asyncio.sleep(1.0)
            assert not on(c, "NBIRTH", "spb-8") and not on(c, "NDATA", "spb-8")
            now = int(time.time() * 1000)
            await c.publish(state, {"online": True, "timestamp": now}, retain=True)
            await c.answers(topic("NBIRTH", "spb-8"), 1)
            await c.answers(topic("NDATA", "spb-8"), 1)
            await c.publish(state, {"online": False, "timestamp": now + 1}, retain=True)
            await poll(lambda: "scada is offline" in daemon.log.read_text(), 20, "offline seen")
            await asyncio.sleep(0.5)
            quiet = len(on(c, "NDATA", "spb-8"))
            await asyncio.sleep(1.0)
            assert len(on(c, "NDATA", "spb-8")) == quiet  # nothing while the host is away
            # An older STATE (a stale retained one put back) changes nothing.
            await c.publish(state, {"online": True, "timestamp": now - 5}, retain=True)
            await asyncio.sleep(1.0)
            assert len(on(c, "NBIRTH", "spb-8")) == 1
            await c.publish(state, {"online": True, "timestamp": now + 2}, retain=True)
            await c.answers(topic("NBIRTH", "spb-8"), 2)


@needs_mosquitto
async def test_a_command_by_alias_alone_writes_the_metric(tmp_path, decode):
    with node_on_a_broker(tmp_path, "spb-9") as (broker, _):
        async with Caller(broker.port, ["spBv1.0/#"]) as c:
            births = await c.answers(topic("NBIRTH", "spb-9"), 1)
            [birth] = decode([births[0].payload])
            alias = int(metrics(birth)["GPIO/led"]["alias"])
            command = pb.Payload(timestamp=1)
            metric = command.metrics.add(alias=alias)
            pb.set_value(metric, pb.BOOLEAN, True)
            await c.publish(topic("NCMD", "spb-9"), command.SerializeToString(), qos=0)

            def led_on() -> Any:
                payloads = [births[0].payload, *(r.payload for r in on(c, "NDATA", "spb-9"))]
                return any(
                    metrics(d, [birth]).get("GPIO/led", {}).get("value") is True for d in decode(payloads)[1:]
                )

            await poll(led_on, 20, "the LED on, written by alias")
