"""scripts/install-pi.sh: what it would do on this machine, and what it does to a Raspberry Pi OS root.

The root is a directory laid out like a Pi's SD card as far as the script looks:
the device tree's model (so the board is detected), /boot/firmware/config.txt
and cmdline.txt. The script writes the user, groups, udev rules, unit and
config there as it would on the Pi; a second run must change nothing, and
--uninstall must take back what it wrote (and only that).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from edgeclaw.config.loader import load_config

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "install-pi.sh"
STEPS = [
    "this machine: architecture and board",
    "system packages (apt)",
    "edgeclaw in a virtualenv at /opt/edgeclaw",
    "the system user edgeclaw and its groups (i2c, spi, gpio, dialout)",
    "directories: /etc/edgeclaw",
    "udev rules",
    "I2C and SPI on",
    "the technician console",
    "/etc/edgeclaw/edgeclaw.toml",
    "the systemd unit edgeclaw.service",
    "edgeclaw doctor",
    "start the service",
]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="writing a root's users and owners needs root")
needs_sysusers = pytest.mark.skipif(
    shutil.which("systemd-sysusers") is None, reason="systemd-sysusers is not installed (systemd)"
)


def install(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGECLAW_")}
    done = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=300)
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def pi_root(tmp_path: Path, model: str = "Raspberry Pi 4 Model B Rev 1.4") -> Path:
    root = tmp_path / "root"
    (root / "proc" / "device-tree").mkdir(parents=True)
    (root / "proc" / "device-tree" / "model").write_bytes(model.encode() + b"\0")
    (root / "boot" / "firmware").mkdir(parents=True)
    (root / "boot" / "firmware" / "config.txt").write_text("[all]\narm_64bit=1\n")
    (root / "boot" / "firmware" / "cmdline.txt").write_text(
        "console=serial0,115200 console=tty1 root=PARTUUID=1234-02 rootwait\n"
    )
    return root


def snapshot(root: Path) -> dict[str, tuple[str, int, int]]:
    """Every file and link under root: content digest (or link target), mode, mtime."""
    out: dict[str, tuple[str, int, int]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        if path.is_symlink():
            what = "-> " + os.readlink(path)
        elif path.is_file():
            what = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            what = "dir"
        out[str(path.relative_to(root))] = (what, st.st_mode, st.st_mtime_ns)
    return out


def group_members(root: Path, group: str) -> list[str]:
    for line in (root / "etc" / "group").read_text().splitlines():
        name, _, _, members = line.split(":")
        if name == group:
            return members.split(",") if members else []
    return []


def test_dry_run_on_this_machine_lists_every_step_and_changes_nothing() -> None:
    watched = [
        Path("/etc/edgeclaw/edgeclaw.toml"),
        Path("/etc/systemd/system/edgeclaw.service"),
        Path("/etc/udev/rules.d/60-edgeclaw.rules"),
        Path("/etc/sysusers.d/edgeclaw.conf"),
        Path("/opt/edgeclaw"),
        Path("/var/lib/edgeclaw-install"),
    ]
    before = {p: p.exists() for p in watched}
    done = install("--dry-run")
    for title in STEPS:
        assert title in done.stdout, f"step {title!r} missing:\n{done.stdout}"
    assert "dry run: nothing is changed" in done.stdout
    assert (
        "would write /etc/systemd/system/edgeclaw.service" in done.stdout or "ok: /etc/systemd" in done.stdout
    )
    assert {p: p.exists() for p in watched} == before


def test_dry_run_for_an_armhf_pi_zero_names_the_apt_packages_and_the_console_steps() -> None:
    done = install("--dry-run", "--arch", "armhf", "--board", "rpi-zero-w", "--console", "gadget")
    assert "architecture: armhf" in done.stdout
    assert "board: rpi-zero-w (--board)" in done.stdout
    # No PyPI wheel for spidev on 32-bit ARM: it comes from the distribution.
    assert "python3-spidev" in done.stdout
    assert "the technician console: gadget" in done.stdout


@needs_root
@needs_sysusers
def test_install_into_a_pi_root_writes_user_udev_rules_unit_and_config(tmp_path: Path) -> None:
    root = pi_root(tmp_path)
    done = install("--root", str(root), "--console", "uart", "--arch", "arm64")
    assert "board: rpi4b (device tree: Raspberry Pi 4 Model B Rev 1.4)" in done.stdout
    assert "REBOOT NEEDED" in done.stdout
    # The user and its hardware groups.
    assert any(line.startswith("edgeclaw:") for line in (root / "etc" / "passwd").read_text().splitlines())
    for group in ("i2c", "spi", "gpio", "dialout"):
        assert "edgeclaw" in group_members(root, group), group
    # udev rules for what the rpi4b profile grants.
    rules = (root / "etc/udev/rules.d/60-edgeclaw.rules").read_text()
    assert 'SUBSYSTEM=="i2c-dev", KERNEL=="i2c-1", GROUP="i2c", MODE="0660"' in rules
    assert 'KERNEL=="spidev0.0", GROUP="spi"' in rules
    assert 'KERNEL=="gpiochip*", GROUP="gpio"' in rules
    # The unit, run from the virtualenv, enabled.
    unit = root / "etc/systemd/system/edgeclaw.service"
    assert unit.read_text() == (ROOT / "systemd/edgeclaw.service").read_text()
    dropin = (root / "etc/systemd/system/edgeclaw.service.d/install-pi.conf").read_text()
    assert "ExecStart=\nExecStart=/opt/edgeclaw/bin/edgeclaw run" in dropin
    assert os.readlink(root / "etc/systemd/system/multi-user.target.wants/edgeclaw.service").endswith(
        "/etc/systemd/system/edgeclaw.service"
    )
    # The buses and the UART on; the kernel's console off the UART.
    boot = (root / "boot/firmware/config.txt").read_text().splitlines()
    assert {"dtparam=i2c_arm=on", "dtparam=spi=on", "enable_uart=1"} <= set(boot)
    assert "console=serial0" not in (root / "boot/firmware/cmdline.txt").read_text()
    assert "i2c-dev" in (root / "etc/modules-load.d/edgeclaw.conf").read_text().split()
    # The config: commented, for this board and console, one the daemon accepts; readable by its group only.
    path = root / "etc/edgeclaw/edgeclaw.toml"
    config = load_config(path)
    assert config.board == "rpi4b"
    assert config.console.ports == ["/dev/serial0"]
    assert "# [mqtt]" in path.read_text()  # the rest stays as commented defaults
    st = path.stat()
    assert st.st_mode & 0o777 == 0o640
    edgeclaw_gid = next(
        int(line.split(":")[2])
        for line in (root / "etc/group").read_text().splitlines()
        if line.startswith("edgeclaw:")
    )
    assert st.st_gid == edgeclaw_gid


@needs_root
@needs_sysusers
def test_a_second_run_changes_nothing(tmp_path: Path) -> None:
    root = pi_root(tmp_path)
    install("--root", str(root), "--console", "uart", "--arch", "arm64")
    first = snapshot(root)
    again = install("--root", str(root), "--console", "uart", "--arch", "arm64")
    assert "done: 0 change(s)" in again.stdout, again.stdout
    assert snapshot(root) == first


@needs_root
@needs_sysusers
def test_an_existing_config_is_never_overwritten(tmp_path: Path) -> None:
    root = pi_root(tmp_path)
    mine = 'board = "rpi4b"\n[mqtt]\nenabled = true\n'
    (root / "etc/edgeclaw").mkdir(parents=True)
    (root / "etc/edgeclaw/edgeclaw.toml").write_text(mine)
    done = install("--root", str(root), "--console", "uart", "--arch", "arm64")
    assert (root / "etc/edgeclaw/edgeclaw.toml").read_text() == mine
    assert "kept as it is" in done.stdout
    assert 'ports = ["/dev/serial0"]' in done.stdout  # says what to add for the console it was asked for


@needs_root
@needs_sysusers
def test_uninstall_removes_what_it_wrote_and_keeps_an_edited_config(tmp_path: Path) -> None:
    root = pi_root(tmp_path)
    install("--root", str(root), "--arch", "arm64")
    config = root / "etc/edgeclaw/edgeclaw.toml"
    config.write_text(config.read_text() + "\n# the operator's note\n")
    done = install("--root", str(root), "--uninstall")
    for gone in (
        "etc/systemd/system/edgeclaw.service",
        "etc/systemd/system/edgeclaw.service.d/install-pi.conf",
        "etc/systemd/system/multi-user.target.wants/edgeclaw.service",
        "etc/udev/rules.d/60-edgeclaw.rules",
        "etc/sysusers.d/edgeclaw.conf",
        "etc/tmpfiles.d/edgeclaw.conf",
        "etc/modules-load.d/edgeclaw.conf",
    ):
        assert not os.path.lexists(root / gone), gone
    assert config.exists() and "kept: /etc/edgeclaw/edgeclaw.toml (changed" in done.stdout
    assert (root / "var/lib/edgeclaw").is_dir()  # state stays without --purge
    assert "uninstalled: 0 change(s)" in install("--root", str(root), "--uninstall").stdout


@needs_root
@needs_sysusers
def test_uninstall_purge_also_removes_config_state_and_user(tmp_path: Path) -> None:
    root = pi_root(tmp_path)
    install("--root", str(root), "--arch", "arm64")
    install("--root", str(root), "--uninstall", "--purge")
    assert not (root / "etc/edgeclaw").exists()
    assert not (root / "var/lib/edgeclaw").exists()
    assert not any(line.startswith("edgeclaw:") for line in (root / "etc/passwd").read_text().splitlines())


@needs_root
@needs_sysusers
def test_bubblewrap_variant_installs_its_unit_and_sets_the_sandbox(tmp_path: Path) -> None:
    root = pi_root(tmp_path)
    install("--root", str(root), "--arch", "arm64", "--sandbox", "bubblewrap")
    unit = (root / "etc/systemd/system/edgeclaw.service").read_text()
    assert unit == (ROOT / "systemd/edgeclaw-bubblewrap.service").read_text()
    assert load_config(root / "etc/edgeclaw/edgeclaw.toml").sandbox.backend == "bubblewrap"


@needs_root
@needs_sysusers
def test_usb_gadget_console_on_a_zero_2_w(tmp_path: Path) -> None:
    root = pi_root(tmp_path, model="Raspberry Pi Zero 2 W Rev 1.0")
    done = install("--root", str(root), "--arch", "arm64", "--console", "gadget")
    assert "board: rpi-zero-2w" in done.stdout
    assert "dtoverlay=dwc2" in (root / "boot/firmware/config.txt").read_text().splitlines()
    assert {"dwc2", "g_serial"} <= set((root / "etc/modules-load.d/edgeclaw.conf").read_text().split())
    assert load_config(root / "etc/edgeclaw/edgeclaw.toml").console.ports == ["/dev/ttyGS0"]
    assert (
        'KERNEL=="ttyGS[0-9]*", GROUP="dialout"' in (root / "etc/udev/rules.d/60-edgeclaw.rules").read_text()
    )


@needs_root
@needs_sysusers
def test_not_a_pi_gets_no_boot_changes(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    done = install("--root", str(root), "--arch", "amd64")
    assert "board: generic-linux" in done.stdout
    assert "skipped: not a Raspberry Pi (generic-linux)" in done.stdout
    assert load_config(root / "etc/edgeclaw/edgeclaw.toml").board == "generic-linux"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--console", "serial"], "--console must be uart, gadget or none, not 'serial'"),
        (["--sandbox", "docker"], "--sandbox must be firejail or bubblewrap, not 'docker'"),
        (["--purge"], "--purge goes with --uninstall"),
        (["--board", "no-such-board", "--dry-run"], "no board profile named 'no-such-board'"),
        (["--frobnicate"], "unknown option --frobnicate"),
    ],
)
def test_bad_options_are_refused_naming_what_is_wrong(args: list[str], says: str) -> None:
    done = install(*args, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr


@pytest.mark.skipif(shutil.which("runuser") is None or os.geteuid() != 0, reason="needs root and runuser")
def test_without_root_only_a_dry_run_is_allowed() -> None:
    done = subprocess.run(
        ["runuser", "-u", "nobody", "--", "bash", str(SCRIPT)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "run as root" in done.stderr and "--dry-run" in done.stderr


def test_a_real_run_needs_the_checkout_it_installs_from(tmp_path: Path) -> None:
    lone = tmp_path / "install-pi.sh"
    shutil.copy(SCRIPT, lone)
    (tmp_path / "root").mkdir()
    done = subprocess.run(
        ["bash", str(lone), "--root", str(tmp_path / "root")], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "run it from a checkout" in done.stderr
    assert not any((tmp_path / "root").iterdir())  # nothing half-done
    # A dry run still lists the steps.
    assert (
        "dry run" in subprocess.run(["bash", str(lone), "--dry-run"], capture_output=True, text=True).stdout
    )


def path_without(tmp_path: Path, hidden: set[str]) -> str:
    """A PATH with every program of this machine but `hidden`: a system without systemd's tools."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for directory in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        if not os.path.isdir(directory):
            continue
        for name in os.listdir(directory):
            target = bin_dir / name
            if (
                name not in hidden
                and not target.exists()
                and os.access(os.path.join(directory, name), os.X_OK)
            ):
                target.symlink_to(os.path.join(directory, name))
    return str(bin_dir)


@needs_root
@pytest.mark.skipif(shutil.which("useradd") is None, reason="needs useradd (passwd)")
def test_a_root_without_systemd_gets_the_same_user_directories_and_enablement(tmp_path: Path) -> None:
    """A minimal Debian (debootstrap's minbase) has no systemd-sysusers, systemd-tmpfiles or systemctl."""
    root = pi_root(tmp_path)
    etc = root / "etc"
    etc.mkdir()
    (etc / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (etc / "shadow").write_text("root:*:19000:0:99999:7:::\n")
    (etc / "group").write_text("root:x:0:\ndialout:x:20:\n")
    (etc / "gshadow").write_text("root:*::\ndialout:*::\n")
    env_path = path_without(tmp_path, {"systemd-sysusers", "systemd-tmpfiles", "systemctl"})
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGECLAW_")} | {"PATH": env_path}
    argv = ["bash", str(SCRIPT), "--root", str(root), "--arch", "arm64"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for group in ("i2c", "spi", "gpio", "dialout"):
        assert "edgeclaw" in group_members(root, group), group
    passwd = {line.split(":")[0]: line.split(":") for line in (etc / "passwd").read_text().splitlines()}
    uid, gid = int(passwd["edgeclaw"][2]), int(passwd["edgeclaw"][3])
    conf_dir, state_dir = (root / "etc/edgeclaw").stat(), (root / "var/lib/edgeclaw").stat()
    assert (conf_dir.st_mode & 0o777, conf_dir.st_uid, conf_dir.st_gid) == (0o770, 0, gid)
    assert (state_dir.st_mode & 0o777, state_dir.st_uid, state_dir.st_gid) == (0o750, uid, gid)
    link = root / "etc/systemd/system/multi-user.target.wants/edgeclaw.service"
    assert os.readlink(link) == "/etc/systemd/system/edgeclaw.service"
    again = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert "done: 0 change(s)" in again.stdout, again.stdout + again.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_the_script_passes_shellcheck() -> None:
    done = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout
