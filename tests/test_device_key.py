"""The device's own signing key: made once with mode 0600, refused when others may use it, and
signatures that bind the topic, the Correlation Data and the payload."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from edgeclaw.config.device_key_text import parse_public_key
from edgeclaw.net import device_key
from edgeclaw.net.device_key import (
    KEY_FILENAME,
    DeviceKey,
    DeviceKeyUnavailable,
    DeviceSigner,
    signature_of,
    verify,
)
from edgeclaw.net.mqtt_connection import signed_properties

TOPIC = "edgeclaw/dev-a/approval/request"
BODY = b'{"id":"q1","tool":"exec","summary":"ls -la"}'


def test_the_key_is_made_once_with_mode_0600_and_kept(tmp_path: Path):
    first = DeviceKey.in_state_dir(tmp_path)
    path = tmp_path / KEY_FILENAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert DeviceKey.in_state_dir(tmp_path).public == first.public
    assert [p.name for p in tmp_path.iterdir()] == [KEY_FILENAME]  # no temporary file left
    assert first.public.startswith("ed25519:") and len(parse_public_key(first.public)) == 32


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o602])
def test_a_key_file_others_may_use_is_refused_saying_how_to_fix_it(tmp_path: Path, mode: int):
    DeviceKey.in_state_dir(tmp_path)
    (tmp_path / KEY_FILENAME).chmod(mode)
    with pytest.raises(DeviceKeyUnavailable, match=rf"mode {mode:04o}: readable by others .*chmod 600"):
        DeviceKey.in_state_dir(tmp_path)
    signer = DeviceSigner(tmp_path)
    signer.load()
    assert signer.key is None and signer.sign(TOPIC, BODY) is None
    assert signer.status_fields()["device_key"] is None
    assert "chmod 600" in str(signer.status_fields()["device_key_problem"])


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the file to another user")
def test_a_key_file_another_user_owns_is_refused(tmp_path: Path):
    DeviceKey.in_state_dir(tmp_path)
    os.chown(tmp_path / KEY_FILENAME, 1, 1)
    with pytest.raises(DeviceKeyUnavailable, match="belongs to uid 1"):
        DeviceKey.in_state_dir(tmp_path)


def test_without_the_package_the_device_says_so_and_makes_no_key(tmp_path: Path, monkeypatch):
    def missing() -> None:
        raise DeviceKeyUnavailable("device signatures need the 'cryptography' package; install ...")

    monkeypatch.setattr(device_key, "_ed25519", missing)
    signer = DeviceSigner(tmp_path)
    signer.load()
    fields = signer.status_fields()
    assert fields["device_key"] is None and "cryptography" in str(fields["device_key_problem"])
    assert signer.sign(TOPIC, BODY) is None
    assert not (tmp_path / KEY_FILENAME).exists()


def test_over_mqtt_3_nothing_is_signed_and_the_status_says_why(tmp_path: Path):
    signer = DeviceSigner(tmp_path, v5=False)
    signer.load()
    assert "MQTT 5" in str(signer.status_fields()["device_key_problem"])
    assert not (tmp_path / KEY_FILENAME).exists()


def test_a_signature_binds_the_topic_the_correlation_and_the_payload(tmp_path: Path):
    key = DeviceKey.in_state_dir(tmp_path)
    public = parse_public_key(key.public)
    sig = key.sign(TOPIC, BODY, b"corr")
    assert verify(public, TOPIC, BODY, b"corr", sig)
    assert not verify(public, "edgeclaw/dev-b/approval/request", BODY, b"corr", sig)
    assert not verify(public, TOPIC, BODY.replace(b"ls -la", b"ls -lb"), b"corr", sig)
    assert not verify(public, TOPIC, BODY, b"other", sig)
    assert not verify(public, TOPIC, BODY, None, sig)
    other = parse_public_key(DeviceKey.in_state_dir(tmp_path / "other").public)
    assert not verify(other, TOPIC, BODY, b"corr", sig)
    for bad in (None, "", "not base64!", "QUJD", sig[:-4] + "AAA="):
        assert not verify(public, TOPIC, BODY, b"corr", bad)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("rsa:AAAA", "must start with 'ed25519:'"),
        ("ed25519:***", "not valid base64"),
        ("ed25519:QUJD", "32 bytes"),
        (42, "must be a string"),
    ],
)
def test_a_malformed_public_key_is_refused_naming_what_is_wrong(text: object, says: str):
    with pytest.raises(ValueError, match=says):
        parse_public_key(text)


def test_the_signature_is_added_to_a_copy_of_the_properties(tmp_path: Path):
    signer = DeviceSigner(tmp_path)
    signer.load()
    props = Properties(PacketTypes.PUBLISH)
    props.CorrelationData = b"c1"
    props.UserProperty = ("key", "value")
    signed = signed_properties(signer, TOPIC, BODY, props, PacketTypes.PUBLISH)
    assert signed is not props and props.UserProperty == [("key", "value")]  # a retry signs afresh
    sig = signature_of(signed.UserProperty)
    assert signed.UserProperty[0] == ("key", "value") and sig is not None
    assert verify(parse_public_key(signer.status_fields()["device_key"]), TOPIC, BODY, b"c1", sig)
    bare = signed_properties(signer, TOPIC, BODY, None, PacketTypes.PUBLISH)
    assert verify(parse_public_key(signer.key.public), TOPIC, BODY, None, signature_of(bare.UserProperty))
