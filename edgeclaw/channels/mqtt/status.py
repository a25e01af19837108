"""What the retained `status` says about the machine: name, addresses, OS, kernel, Python.

A fleet dashboard lists devices from their retained status alone, so it has to
say what an operator asks first (which machine, where on the network, which
software), without a round trip to the device. Read from the kernel's own
tables (/proc, ioctl), never by running a program or asking the network:
status is built at every connect and must not wait on anything.
"""

from __future__ import annotations

import fcntl
import ipaddress
import platform
import socket
import struct
from functools import lru_cache
from pathlib import Path
from typing import Any

SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address


def _ipv4_of(name: str) -> str | None:
    """The IPv4 address of interface `name`, or None when it has none (or this is not Linux)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def _ipv6_addresses(proc: Path) -> list[tuple[str, str]]:
    """(interface, address) for every IPv6 address the kernel lists (/proc/net/if_inet6)."""
    out: list[tuple[str, str]] = []
    try:
        lines = (proc / "net" / "if_inet6").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or len(parts[0]) != 32:
            continue
        try:
            address = ipaddress.IPv6Address(bytes.fromhex(parts[0]))
        except ValueError:
            continue
        out.append((parts[5], str(address)))
    return out


def addresses(proc: Path = Path("/proc")) -> list[str]:
    """The machine's addresses a peer could reach it at: loopback and link-local ones left out."""
    found: list[str] = []
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        names = []
    for name in names:
        v4 = _ipv4_of(name)
        if v4 is not None:
            found.append(v4)
    found += [address for _, address in _ipv6_addresses(proc)]
    usable: list[str] = []
    for text in found:
        ip = ipaddress.ip_address(text)
        if ip.is_loopback or ip.is_link_local or ip.is_unspecified or text in usable:
            continue
        usable.append(text)
    return usable


def _os_name(etc: Path) -> str | None:
    """PRETTY_NAME from os-release ("Debian GNU/Linux 12 (bookworm)"), else None."""
    for path in (etc / "os-release", Path("/usr/lib/os-release")):
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition("=")
            if key == "PRETTY_NAME":
                return value.strip().strip('"') or None
    return None


@lru_cache(maxsize=1)
def host_facts() -> dict[str, Any]:
    """What does not change while the daemon runs: the OS, the kernel, the machine, Python."""
    uname = platform.uname()
    return {
        "os": _os_name(Path("/etc")),
        "kernel": f"{uname.system} {uname.release}".strip() or None,
        "machine": uname.machine or None,
        "python": platform.python_version(),
    }


def machine_status() -> dict[str, Any]:
    """The machine's part of `status`: host name and addresses (asked again each time: DHCP moves
    them), then the fixed facts."""
    return {"hostname": socket.gethostname(), "addresses": addresses(), **host_facts()}
