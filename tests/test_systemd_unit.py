"""The systemd unit, sysusers and tmpfiles files: the settings deployments rely on, firejail compatibility,
and what systemd's own tools say about them (when installed)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SYSTEMD_DIR = Path(__file__).resolve().parent.parent / "systemd"
UNIT = SYSTEMD_DIR / "edgeclaw.service"
SYSUSERS = SYSTEMD_DIR / "edgeclaw.sysusers.conf"
TMPFILES = SYSTEMD_DIR / "edgeclaw.tmpfiles.conf"

# Options that make systemd imply NoNewPrivileges=yes for a User= service, which
# breaks the setuid firejail that every shell tool runs under.
IMPLY_NO_NEW_PRIVILEGES = (
    "SystemCallFilter",
    "SystemCallArchitectures",
    "RestrictAddressFamilies",
    "RestrictNamespaces",
    "PrivateDevices",
    "ProtectKernelTunables",
    "ProtectKernelModules",
    "ProtectKernelLogs",
    "ProtectClock",
    "MemoryDenyWriteExecute",
    "RestrictRealtime",
    "RestrictSUIDSGID",
    "LockPersonality",
    "DynamicUser",
)

# What systemd's unit-file parser says about the file's own syntax and settings.
SYNTAX_MARKERS = ("Unknown key", "Unknown section", "Unknown lvalue", "Failed to parse", "Invalid")


def parse_unit(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) for every assignment, in order; keys may repeat (Environment=, After=)."""
    entries: list[tuple[str, str, str]] = []
    section = ""
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#;":
            continue
        if line.endswith("\\"):  # systemd's line continuation
            pending = line[:-1] + " "
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        assert sep, f"not an assignment: {raw!r}"
        entries.append((section, key.strip(), value.strip()))
    return entries


@pytest.fixture(scope="module")
def unit() -> list[tuple[str, str, str]]:
    return parse_unit(UNIT.read_text())


def values(unit: list[tuple[str, str, str]], section: str, key: str) -> list[str]:
    return [v for s, k, v in unit if s == section and k == key]


def single(unit: list[tuple[str, str, str]], section: str, key: str) -> str:
    found = values(unit, section, key)
    assert len(found) == 1, f"[{section}] {key}= should be set exactly once, found {found}"
    return found[0]


def seconds(value: str) -> float:
    """systemd time spans like '30s', '2min', '1min 30s', '90'."""
    units = {"": 1.0, "s": 1.0, "sec": 1.0, "ms": 0.001, "m": 60.0, "min": 60.0, "h": 3600.0}
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value):
        total += float(number) * units[unit]
    return total


def test_notify_service_with_watchdog(unit: list[tuple[str, str, str]]) -> None:
    assert single(unit, "Service", "Type") == "notify"
    assert single(unit, "Service", "NotifyAccess") == "main"
    assert seconds(single(unit, "Service", "WatchdogSec")) == 30
    assert single(unit, "Service", "Restart") == "on-failure"
    assert seconds(single(unit, "Service", "RestartSec")) > 0
    # Longer than the daemon's 10 s in-flight deadline, or systemd kills it mid-report.
    assert seconds(single(unit, "Service", "TimeoutStopSec")) > 10
    exec_start = single(unit, "Service", "ExecStart")
    assert exec_start.split()[0] == "/usr/bin/edgeclaw"
    assert exec_start.split()[1:] == ["run"]


def test_user_groups_and_directories(unit: list[tuple[str, str, str]]) -> None:
    assert single(unit, "Service", "User") == "edgeclaw"
    assert single(unit, "Service", "Group") == "edgeclaw"
    groups = " ".join(values(unit, "Service", "SupplementaryGroups")).split()
    assert set(groups) == {"i2c", "spi", "gpio", "dialout"}
    assert single(unit, "Service", "StateDirectory") == "edgeclaw"
    assert single(unit, "Service", "ConfigurationDirectory") == "edgeclaw"
    assert single(unit, "Service", "RuntimeDirectory") == "edgeclaw"
    assert "EDGECLAW_STATE_DIR=/var/lib/edgeclaw" in values(unit, "Service", "Environment")
    assert single(unit, "Install", "WantedBy") == "multi-user.target"


def test_nothing_implies_no_new_privileges(unit: list[tuple[str, str, str]]) -> None:
    keys = {k for _, k, _ in unit}
    present = sorted(keys.intersection(IMPLY_NO_NEW_PRIVILEGES))
    assert not present, f"these imply NoNewPrivileges=yes and break firejail: {present}"
    for value in values(unit, "Service", "NoNewPrivileges"):
        assert value.lower() in {"no", "false", "0", "off"}
    # firejail needs CAP_SYS_ADMIN, CAP_SETUID & co.; an empty bounding set kills it and a
    # narrowed one is a trap, so the unit leaves the bounding set alone.
    assert "CapabilityBoundingSet" not in keys
    # strict would make /run read-only, where firejail keeps its state.
    assert single(unit, "Service", "ProtectSystem") in {"full", "yes", "true"}


def test_absent_options_are_explained() -> None:
    comments = "\n".join(line for line in UNIT.read_text().splitlines() if line.lstrip().startswith("#"))
    assert "firejail" in comments
    for option in (*IMPLY_NO_NEW_PRIVILEGES, "NoNewPrivileges", "CapabilityBoundingSet"):
        assert f"{option}=" in comments, f"the comment block should say why {option}= is absent"


def test_parser_sees_through_comments() -> None:
    parsed = parse_unit("[Service]\n# SystemCallFilter=@system-service\n; x=1\nA=b\\\n  c\n")
    assert parsed == [("Service", "A", "b c")]


def _help(tool: str) -> str:
    run = subprocess.run([tool, "verify", "--help"], capture_output=True, text=True, timeout=30)
    return run.stdout + run.stderr


def systemd_analyze_verify(unit_text: str, tmp_path: Path) -> tuple[Path, list[str]]:
    """Run `systemd-analyze verify` on a copy; return the copy's path and the output lines."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (Debian: apt-get install systemd)")
    # /usr/bin/edgeclaw is not installed here; point ExecStart at something that exists so
    # the only complaints left are about the unit itself.
    python = f'"{sys.executable}"' if " " in sys.executable else sys.executable
    unit_text = re.sub(r"(?m)^ExecStart=.*$", f"ExecStart={python} -m edgeclaw run", unit_text)
    copy = tmp_path / "edgeclaw.service"
    copy.write_text(unit_text)
    help_text = _help(tool)
    cmd = [tool, "verify"]
    if "--man" in help_text:
        cmd.append("--man=no")
    if "--recursive-errors" in help_text:
        # Only this unit's errors, not those of whatever the host's units depend on.
        cmd.append("--recursive-errors=no")
    cmd.append(str(copy))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYSTEMD_")}
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    return copy, (run.stdout + run.stderr).splitlines()


def syntax_problems(copy: Path, lines: list[str]) -> list[str]:
    """Messages about the unit's own syntax; environmental ones (missing users, no PID 1) are ignored."""
    at_line = re.compile(re.escape(str(copy)) + r":\d+:")
    return [
        line
        for line in lines
        if at_line.search(line)
        or (("edgeclaw.service" in line or str(copy) in line) and any(m in line for m in SYNTAX_MARKERS))
    ]


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    copy, lines = systemd_analyze_verify(UNIT.read_text(), tmp_path)
    assert syntax_problems(copy, lines) == [], "\n".join(lines)


def test_systemd_analyze_verify_catches_mistakes(tmp_path: Path) -> None:
    # The check above is only worth something if this systemd reports such mistakes at all.
    broken = UNIT.read_text().replace("[Service]\n", "[Service]\nFrobnicate=yes\nWatchdogSec=banana\n", 1)
    copy, lines = systemd_analyze_verify(broken, tmp_path)
    problems = syntax_problems(copy, lines)
    assert any("Frobnicate" in p for p in problems), lines
    assert any("banana" in p for p in problems), lines


def test_sysusers_creates_user_and_hardware_groups(tmp_path: Path) -> None:
    tool = shutil.which("systemd-sysusers")
    if tool is None:
        pytest.skip("systemd-sysusers is not installed (Debian: apt-get install systemd)")
    (tmp_path / "etc").mkdir()
    run = subprocess.run(
        [tool, f"--root={tmp_path}", str(SYSUSERS)], capture_output=True, text=True, timeout=30
    )
    assert run.returncode == 0, run.stderr
    passwd = {
        line.split(":")[0]: line.split(":") for line in (tmp_path / "etc/passwd").read_text().splitlines()
    }
    assert passwd["edgeclaw"][5] == "/var/lib/edgeclaw"
    assert passwd["edgeclaw"][6].endswith("nologin")
    group = {
        line.split(":")[0]: line.split(":") for line in (tmp_path / "etc/group").read_text().splitlines()
    }
    assert passwd["edgeclaw"][3] == group["edgeclaw"][2]
    for name in ("i2c", "spi", "gpio", "dialout"):
        assert "edgeclaw" in group[name][3].split(","), name

    tmpfiles = shutil.which("systemd-tmpfiles")
    if tmpfiles is None or os.geteuid() != 0:
        return  # creating directories owned by another user needs root
    run = subprocess.run(
        [tmpfiles, f"--root={tmp_path}", "--create", str(TMPFILES)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 0, run.stderr
    uid, gid = int(passwd["edgeclaw"][2]), int(group["edgeclaw"][2])
    etc = (tmp_path / "etc/edgeclaw").stat()
    assert (etc.st_uid, etc.st_gid, etc.st_mode & 0o7777) == (0, gid, 0o770)
    state = (tmp_path / "var/lib/edgeclaw").stat()
    assert (state.st_uid, state.st_gid, state.st_mode & 0o7777) == (uid, gid, 0o750)


def test_memory_is_bounded_and_the_cgroup_delegated(unit: list[tuple[str, str, str]]) -> None:
    # The whole service, commands included, under a share of the board's RAM.
    memory_max = single(unit, "Service", "MemoryMax")
    assert re.fullmatch(r"([1-9]\d?)%", memory_max), memory_max
    # The daemon makes its commands' pids and memory cgroups in its own, delegated cgroup.
    assert {"pids", "memory"} <= set(single(unit, "Service", "Delegate").split())
    # A command killed for memory must not stop the service (the default OOMPolicy=stop would).
    assert single(unit, "Service", "OOMPolicy") == "continue"
    # Read-only /sys/fs/cgroup would take the delegated cgroup away again.
    for value in values(unit, "Service", "ProtectControlGroups"):
        assert value.lower() in {"no", "false", "0", "off"}
    comments = "\n".join(line for line in UNIT.read_text().splitlines() if line.lstrip().startswith("#"))
    assert "ProtectControlGroups=" in comments and "sandbox.max_total_memory_mb" in comments


def test_the_config_directory_alone_is_writable_under_protect_system(
    unit: list[tuple[str, str, str]],
) -> None:
    """config_apply replaces /etc/edgeclaw/edgeclaw.toml: ProtectSystem= makes /etc read-only, so the
    unit opens that one directory again, and nothing else under /etc or /usr."""
    paths = " ".join(values(unit, "Service", "ReadWritePaths")).split()
    assert paths == ["/etc/edgeclaw"]
    assert single(unit, "Service", "ConfigurationDirectoryMode") == "0770"


APPLY_UNDER_MOUNTS = """
import asyncio, sys
from pathlib import Path
from types import SimpleNamespace
from edgeclaw.admin.config_apply import apply_config, validate_text

class Policy:
    rules = None
    def replace_rules(self, rules): self.rules = rules
    def validate(self): return []

class Audit:
    def emit(self, *a, **k): pass

path = Path(sys.argv[1])
config, problems = validate_text(path.read_text(), str(path))
runtime = SimpleNamespace(config=config, audit=Audit(), registry=SimpleNamespace(policy=Policy()))
new = path.read_text().replace('log_level = "info"', 'log_level = "debug"')
result = asyncio.run(apply_config(runtime, new, "mqtt:admin", lambda why: None))
print(result["ok"], result["text"])
"""


@pytest.mark.parametrize("config_dir_writable", [True, False], ids=["read-write-paths", "without"])
def test_config_apply_under_a_read_only_etc_as_protect_system_full_makes_it(
    tmp_path: Path, config_dir_writable: bool
) -> None:
    """What ProtectSystem=full plus the unit's ReadWritePaths= do, for real: /etc bind-mounted read-only
    in a mount namespace of its own, the config directory bound writable again on top of it."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    etc = tmp_path / "etc"
    conf = etc / "edgeclaw"
    conf.mkdir(parents=True)
    config = conf / "edgeclaw.toml"
    text = 'board = "sim"\ndevice_id = "ro-01"\nlog_level = "info"\n'
    config.write_text(text)
    apply_py = tmp_path / "apply.py"
    apply_py.write_text(APPLY_UNDER_MOUNTS)
    reopen = ""
    if config_dir_writable:  # ReadWritePaths=: a bind mount of its own, read-write again
        reopen = f"mount --bind {conf} {conf} && mount -o remount,bind,rw {conf} && "
    script = (
        f"mount --make-rprivate / && mount --bind {etc} {etc} && mount -o remount,bind,ro {etc} && "
        f"{reopen}exec {sys.executable} {apply_py} {config}"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=env)
    if done.returncode != 0 and "Operation not permitted" in done.stderr:
        pytest.skip(f"no mount namespace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    if config_dir_writable:
        assert done.stdout.startswith("True applied and reloaded in place"), done.stdout
        assert 'log_level = "debug"' in config.read_text()
        assert (conf / "edgeclaw.toml.previous").read_text() == text
    else:
        assert done.stdout.startswith("False cannot write"), done.stdout
        assert "Read-only file system" in done.stdout and "nothing changed" in done.stdout
        assert config.read_text() == text
