"""The stricter unit for bubblewrap deployments: hardened where firejail's unit cannot be, and still
accepted by systemd's own parser."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_systemd_unit import (
    IMPLY_NO_NEW_PRIVILEGES,
    SYSTEMD_DIR,
    UNIT,
    parse_unit,
    single,
    syntax_problems,
    systemd_analyze_verify,
    values,
)

VARIANT = SYSTEMD_DIR / "edgeclaw-bubblewrap.service"


@pytest.fixture(scope="module")
def variant() -> list[tuple[str, str, str]]:
    return parse_unit(VARIANT.read_text())


def test_it_sets_no_new_privileges_and_what_implies_it(variant) -> None:
    assert single(variant, "Service", "NoNewPrivileges") == "yes"
    keys = {k for _, k, _ in variant}
    for option in (
        "SystemCallFilter",
        "SystemCallArchitectures",
        "RestrictAddressFamilies",
        "LockPersonality",
    ):
        assert option in keys
    # What bubblewrap itself needs stays off, each with a reason in the comments.
    comments = "\n".join(line for line in VARIANT.read_text().splitlines() if line.lstrip().startswith("#"))
    for absent in ("RestrictNamespaces", "ProtectKernelTunables", "PrivateDevices", "MemoryDenyWriteExecute"):
        assert absent not in keys
        assert f"{absent}=" in comments
    assert "@mount" in single(variant, "Service", "SystemCallFilter")
    assert "AF_NETLINK" in single(variant, "Service", "RestrictAddressFamilies")
    assert 'sandbox.backend = "bubblewrap"' in comments and "firejail does NOT work" in comments
    assert int(single(variant, "Service", "TasksMax")) > 0


def test_everything_else_matches_the_shipped_unit(variant) -> None:
    shipped = parse_unit(UNIT.read_text())
    hardening = {
        *IMPLY_NO_NEW_PRIVILEGES,
        "NoNewPrivileges",
        "SystemCallErrorNumber",
        "ProtectSystem",
        "TasksMax",
    }
    core = [(s, k, v) for s, k, v in shipped if k not in hardening]
    assert [(s, k, v) for s, k, v in variant if k not in hardening] == core
    assert values(variant, "Service", "ExecStart") == values(shipped, "Service", "ExecStart")


def test_systemd_analyze_accepts_it(tmp_path: Path) -> None:
    copy, lines = systemd_analyze_verify(VARIANT.read_text(), tmp_path)
    assert syntax_problems(copy, lines) == [], "\n".join(lines)
