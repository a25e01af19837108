"""Properties of the scrubber that a careless change would break, each pinned by a test that fails
when it is broken: text read as a terminal shows it, scrubbing before cutting, ordinary output left
alone, public keys kept."""

from __future__ import annotations

import pytest

from edgeclaw.tools.base import Tool, ToolContext, ToolResult
from edgeclaw.tools.policy import PolicyEngine, PolicyRules
from edgeclaw.tools.ratelimit import RateLimiter
from edgeclaw.tools.registry import Registry
from edgeclaw.tools.scrub import REDACTED, Scrubber

SECRET = "wrapped-secret-value-0042"
STRIPE = "sk_live_" + "51HqLyjWDarjtT1zdp7dc" * 2

# What a terminal does not show, so a secret with it inside reads as the secret on a screen.
HIDDEN = [
    pytest.param("\r", id="bare-cr"),
    pytest.param("\x00", id="nul"),
    pytest.param("\x08", id="backspace"),
    pytest.param("\x7f", id="del"),
    pytest.param("\x1b[0m", id="ansi-reset"),
    pytest.param("\x1b[1;31m", id="ansi-colour"),
    pytest.param("\x1b]0;title\x07", id="osc-title"),
    pytest.param("\x1b(B", id="charset-switch"),
    pytest.param("\x85", id="c1-next-line"),
    pytest.param("\u200b", id="zero-width-space"),
    pytest.param("\u00ad", id="soft-hyphen"),
    pytest.param("\u2060", id="word-joiner"),
    pytest.param("\ufeff", id="bom"),
    pytest.param("\u202e", id="bidi-override"),
]
# Line breaks: a wrapped secret (fold, a terminal's own wrapping) is still the secret.
BREAKS = [
    pytest.param("\r", id="bare-cr"),
    pytest.param("\n", id="lf"),
    pytest.param("\r\n", id="crlf"),
    pytest.param("\x0b", id="vertical-tab"),
    pytest.param("\x0c", id="form-feed"),
]


@pytest.mark.parametrize("hidden", [*HIDDEN, *BREAKS])
def test_a_registered_secret_split_by_what_a_terminal_collapses_is_removed(hidden: str) -> None:
    scrubber = Scrubber([SECRET])
    text = f"before {SECRET[:9]}{hidden}{SECRET[9:17]}{hidden}{SECRET[17:]} after"
    out = scrubber.scrub(text)
    assert out == f"before {REDACTED} after"
    assert scrubber.scrub(out) == out


@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize(
    ("text", "kept"),
    [
        pytest.param("charge {a}{h}{b} now", "charge ", id="token"),
        pytest.param("DB_PASS={a}{h}{b}\n", "DB_PASS=", id="key-value"),
    ],
)
def test_a_credential_pattern_split_by_hidden_characters_is_removed(
    hidden: str, text: str, kept: str
) -> None:
    value = STRIPE if "charge" in text else "hunter2-and-more"
    out = Scrubber().scrub(text.format(a=value[:12], h=hidden, b=value[12:]))
    assert value[12:] not in out and value[:12] not in out.replace(kept, "")
    assert out.startswith(kept + REDACTED)


def test_colour_and_control_codes_in_ordinary_output_stay() -> None:
    text = "\x1b[32mPASS\x1b[0m test_gpio\r\n\x1b[1mtemperature\x1b[0m 21.5 C\x00"
    assert Scrubber([SECRET]).scrub(text) == text


def test_a_secret_around_hidden_characters_loses_them_with_it() -> None:
    # What stays is what was outside the secret; the characters inside it go with it.
    out = Scrubber([SECRET]).scrub(f"\x1b[31m{SECRET[:5]}\x1b[0m{SECRET[5:]}\x1b[0m!")
    assert out == f"\x1b[31m{REDACTED}\x1b[0m!"


class Padded(Tool):
    name = "padded"
    group = "fs"
    description = "Output whose registered secret sits where the size cap cuts."
    parameters = {"type": "object", "properties": {}, "additionalProperties": False}

    async def execute(self, args, ctx):
        return ToolResult(for_llm="x" * 940 + " " + SECRET + " " + "y" * 2000)


async def test_output_is_scrubbed_before_it_is_cut() -> None:
    # Cut first, the cap would leave the first half of the secret showing, which no longer matches.
    reg = Registry(
        PolicyEngine(PolicyRules()), Scrubber([SECRET]), RateLimiter(100, 60.0), max_output_bytes=1000
    )
    reg.register(Padded())
    out = await reg.execute("padded", {}, ToolContext())
    assert "output truncated" in out.for_llm
    assert SECRET[:8] not in out.for_llm and out.for_llm.startswith("x" * 940 + " " + REDACTED)


ORDINARY = [
    "/sys/devices/platform/soc/fe804000.i2c/i2c-1/1-0048/hwmon/hwmon2/temp1_input",
    "/home/pi/Projects/GreenhouseController/firmware/build/esp32/bootloader.bin",
    "/usr/lib/python3/dist-packages/RPi/GPIO/__init__.py:42: RuntimeWarning",
    'Traceback (most recent call last):\n  File "/opt/edgeclaw/lib/python3.11/site-packages/edgeclaw/tools/'
    "registry.py\", line 212, in execute\nKeyError: 'temperature'",
    "test_registered_secret_is_found_as_programs_escape_it PASSED",
    "PASS: test_gpio_toggle\nFAIL: test_spi_loopback",
    "tests: 12 passed, 1 failed; bypass: off",
    "systemd-timesyncd.service: Succeeded. dev-disk-by\\x2duuid-1234.device",
    "[   12.345678] brcmfmac: brcmf_c_preinit_dcmds: Firmware: BCM4345/6 wl0: Jan  4 2021 19:56:29",
    "https://github.com/raspberrypi/linux/blob/rpi-6.1.y/drivers/i2c/busses/i2c-bcm2835.c#L120",
    "see https://docs.python.org/3/library/asyncio-task.html?highlight=timeout#asyncio.timeout",
    "ii  libgpiod2:armhf  1.6.3-1+b3  armhf  C library for interacting with Linux GPIO device",
    "ThisIsAVeryLongCamelCaseIdentifierWithoutDigitsInIt and another_snake_case_name_2024_v3",
    "Keyboard layout: us; monkey-patching done; compass heading 270",
    "The passage of time; the password policy requires 12 characters.",
    # Public keys are as random as private ones, and stay.
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGkq0m8Zb3Qn1eX4vR7tY2uP9sL6wK5jH3fD8cA1bE0z pi@greenhouse",
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQC3x9Yk2Lm4Pq7Rs8Tu1Vw3Xy5Za6Bc7De8Fg9Hi0Jk1Lm2No3Pq4Rs5 pi@host",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_board_output_is_left_alone(text: str) -> None:
    assert Scrubber([SECRET]).scrub(text) == text


def test_a_certificate_body_cut_short_is_not_known_to_be_public() -> None:
    # With its END line a certificate stays (see test_scrub); without it, its lines go: fail closed.
    body = "MIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJ"
    assert (
        Scrubber().scrub(f"-----BEGIN CERTIFICATE-----\n{body}\n")
        == f"-----BEGIN CERTIFICATE-----\n{REDACTED}\n"
    )
