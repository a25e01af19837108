"""Run by Home Assistant's own Python (a venv with `homeassistant` installed): read one MQTT device
discovery payload on stdin and put it through Home Assistant's own code — its abbreviation table, its
device discovery schema, the merge of shared options into each component, and each platform's
discovery schema — then print, per component, whether Home Assistant takes it, what it made of it,
what it warned about and which keys it dropped as unknown. With `render`: what one of its value
templates makes of a payload. No edgeclaw code runs here."""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import sys
import tempfile

import voluptuous as vol
from homeassistant.components.mqtt import discovery
from homeassistant.components.mqtt.schemas import DEVICE_DISCOVERY_SCHEMA


async def main() -> None:
    from homeassistant.core import HomeAssistant
    from homeassistant.helpers import frame

    # Templates are validated against a running Home Assistant, as in Home Assistant itself.
    hass = HomeAssistant(tempfile.mkdtemp())
    frame.async_setup(hass)
    if sys.argv[1:] == ["render"]:
        # {"template": ..., "payload": ...}: what Home Assistant's MQTT value template makes of a payload.
        from homeassistant.helpers.template import Template

        asked = json.load(sys.stdin)
        rendered = Template(asked["template"], hass).async_render_with_possible_json_value(asked["payload"])
        print(json.dumps({"rendered": rendered}))
        return
    payload = discovery.MQTTDiscoveryPayload(json.load(sys.stdin))
    discovery._replace_all_abbreviations(payload)
    out: dict[str, dict[str, object]] = {}
    try:
        DEVICE_DISCOVERY_SCHEMA(payload)
    except vol.Invalid as e:
        print(json.dumps({"device": {"ok": False, "error": str(e)}}))
        return
    # What Home Assistant warns about while taking a component (a unit it will stop accepting, ...).
    warned: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: warned.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger().addHandler(handler)
    for component_id, raw in payload["components"].items():
        warned.clear()
        config = discovery.MQTTDiscoveryPayload(dict(raw))
        platform = config.pop("platform")
        config["device"] = payload["device"]
        config["origin"] = payload["origin"]
        discovery._merge_common_device_options(config, payload)
        schema = importlib.import_module(f"homeassistant.components.mqtt.{platform}").DISCOVERY_SCHEMA
        try:
            validated = schema(dict(config))
        except vol.Invalid as e:
            out[component_id] = {"ok": False, "platform": platform, "error": str(e)}
            continue
        out[component_id] = {
            "ok": True,
            "platform": platform,
            "warnings": list(warned),
            "dropped": sorted(set(config) - set(validated)),
            "config": {k: str(v) for k, v in validated.items() if k not in ("device", "origin")},
        }
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
