"""Deny groups: families of dangerous shell commands, each with a risk level.

Every group is on by default and can be switched off per agent
(`tools.exec.deny_groups`, `tools.agents.ID.exec.deny_groups`). A group's
action is `deny` (refused outright) or, for package installs, `approve`
(a person must allow it). Patterns are matched against every reading of the
command from `command_text.analysis_views`, so quoting, `$IFS`, line
continuations, look-alike letters and invisible characters do not hide a
command from its group.

The groups are a first filter, not the boundary: the sandbox is. They aim to
refuse what is plainly dangerous and to explain why, with few false alarms on
ordinary work (`ls -la`, `grep -r foo .`, `python3 script.py`).
"""

from __future__ import annotations

import fnmatch
import functools
import posixpath
import re
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Literal

from edgeclaw.records import dataclass
from edgeclaw.tools.runtime.command_text import analysis_views

__all__ = ["DENY_GROUPS", "DenyGroup", "DenyHit", "DenyList", "Risk", "canonical_group"]


class Risk(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"


@dataclass(frozen=True)
class DenyGroup:
    """A named family of dangerous commands: refused, or asked about."""

    name: str
    description: str
    risk: Risk
    action: Literal["deny", "approve"]
    sources: tuple[str, ...]  # the regular expressions, compiled on the group's first check
    flags: int = 0

    @functools.cached_property
    def patterns(self) -> tuple[re.Pattern[str], ...]:
        # Compiling every group's patterns (over a hundred) costs a small board a noticeable part
        # of its start; a daemon that never runs a command never needs them.
        return tuple(re.compile(p, self.flags) for p in self.sources)


@dataclass(frozen=True)
class DenyHit:
    """A deny group that matched a command."""

    group: DenyGroup
    matched: str  # the text that matched, for the message

    def describe(self) -> str:
        g = self.group
        return f"deny group {g.name!r} ({g.description}; risk {g.risk}) matched {self.matched!r}"


# Where a command word may start: the beginning, after whitespace or an operator, or
# inside a substitution. Then an optional directory (`/bin/rm`, `./rm`).
_AT = r"(?:^|(?<=[\s;&|(){}`!]))(?:[\w.~/-]*/)?"
# Where a command word ends.
_END = r"(?=$|[\s;&|()<>`'\"])"
# The rest of the same simple command.
_ARGS = r"[^;&|\n]*"
_SHELLS = r"(?:ba|da|z|k|c|tc|fi|a|y|mk)?sh"


def _cmd(*names: str) -> str:
    return _AT + "(?:" + "|".join(names) + ")" + _END


def _group(
    name: str,
    description: str,
    risk: Risk,
    patterns: Iterable[str],
    action: Literal["deny", "approve"] = "deny",
    flags: int = 0,
) -> DenyGroup:
    return DenyGroup(name, description, risk, action, tuple(patterns), flags)


def _long_option(name: str, shortest: int) -> str:
    """`--name` and every abbreviation of it down to `shortest` letters (getopt takes any unique prefix)."""
    tail = ""
    for ch in reversed(name[shortest:]):
        tail = f"(?:{re.escape(ch)}{tail})?"
    return "--" + re.escape(name[:shortest]) + tail + r"(?=[\s=;&|)'\"]|$)"


_SYSTEM_DIRS = (
    r"(?:bin|boot|dev|etc|home|lib\w*|media|mnt|opt|proc|root|run|sbin|snap|srv|sys|tmp|usr|var|lost\+found)"
)
# The directories inside them that hold the system as much as they do: removing /var/lib or /usr/lib
# takes the installed system (and, in the default layout, edgeclaw's own state) with it.
_SYSTEM_SUBDIRS = (
    r"(?:usr/(?:bin|sbin|lib\w*|libexec|share|include|local|src)|var/(?:lib|log|cache|spool|backups|mail|db)"
    r"|etc/[\w.+-]+|boot/[\w.+-]+|lib\w*/[\w.+-]+)"
)
# The root however spelt (`/`, `//`, `/./`, `/..`), a glob or variable right under it (`/*`, `/?`,
# `/$x`), a system directory or one of the system's own directories inside it, a home directory
# (`~`, `~user`, `$HOME`), `.`/`..` and chains of them (`../..`), or everything here.
_ROOTISH = (
    r"(?:/[/.]*\*?|/[?*\[$]\S*|/(?:" + _SYSTEM_SUBDIRS + "|" + _SYSTEM_DIRS + r")/?\*?"
    r"|~[\w.-]*/?\*?|\$\{?HOME\}?/?\*?)"
)
_RM_TARGET = r"(?:--no-preserve-root|" + _ROOTISH + r"|(?:\.\.?/+)*\.\.?/?\*?|\*)"
# rm's recursion, however spelt: -r, -R, inside a bundle (-fR, -Rfv), --recursive or a prefix of it.
_RM_RECURSIVE = r"(?:-[a-zA-Z]*[rR]|" + _long_option("recursive", 1) + ")"
# chmod/chown/chgrp: -R or --recursive (`--re` is ambiguous with --reference, so from `--rec`).
_CH_RECURSIVE = r"(?:-[a-zA-Z]*R|" + _long_option("recursive", 3) + ")"
# Where a target ends: also a closing parenthesis or quote, for `os.system('rm -rf /')` read
# without its quotes.
_TARGET_END = r"(?=$|[\s;&|)'\"\]])"
_WRITE_TO = r"(?:>>?\|?|&>>?|\btee\b(?:\s+-\w+)*)\s*"

DENY_GROUPS: tuple[DenyGroup, ...] = (
    _group(
        "destructive-ops",
        "destructive operations",
        Risk.CRITICAL,
        [
            _cmd("rm") + rf"(?={_ARGS}\s{_RM_RECURSIVE})" + rf"{_ARGS}\s{_RM_TARGET}{_TARGET_END}",
            # --no-preserve-root abbreviated (`--no-p`, even `--n`): rm accepts it.
            _cmd("rm") + rf"{_ARGS}\s{_long_option('no-preserve-root', 1)}",
            # The same from a script: rmtree('/'), or rm -rf / as an argument list.
            rf"\brmtree\s*\(\s*['\"]?{_ROOTISH}['\"]?\s*[,)]",
            rf"['\"]?(?:[\w./-]*/)?rm['\"]?\s*,\s*['\"]?-[a-zA-Z]*[rR][a-zA-Z]*['\"]?\s*,\s*['\"]?{_ROOTISH}['\"]?\s*[,\])]",
            r"--no-preserve-root",
            _cmd(
                r"mkfs(?:\.\w+)?",
                "mke2fs",
                "mkswap",
                "wipefs",
                "fdisk",
                "sfdisk",
                "parted",
                "shred",
                "blkdiscard",
            ),
            _cmd("dd") + rf"{_ARGS}\bof=/dev/",
            _WRITE_TO + r"/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|mtd|loop|disk/)",
            r"(\S+)\s*\(\)\s*\{[^}]*\1\s*\|\s*\1\s*&",  # the classic fork bomb shape
            _cmd("chmod", "chown", "chgrp")
            + rf"(?={_ARGS}\s{_CH_RECURSIVE}){_ARGS}\s/(?:{_SYSTEM_DIRS})?/?(?=$|[\s;&|])",
            _cmd("find") + rf"\s+/(?:{_SYSTEM_DIRS})?/?\s{_ARGS}-delete",
            _cmd("find")
            + rf"\s+/(?:{_SYSTEM_DIRS})?/?\s{_ARGS}-(?:exec|execdir|ok)\s+(?:[\w./-]*/)?(?:rm|shred)\b",
            _cmd("mv") + rf"{_ARGS}\s(?:/|~|\$HOME)\s+/dev/null",
        ],
    ),
    _group(
        "reverse-shells",
        "reverse shells",
        Risk.CRITICAL,
        [
            r"/dev/(?:tcp|udp)/",
            _cmd("nc", "ncat", "netcat") + rf"{_ARGS}\s-[a-zA-Z]*[ec]\b",
            _cmd("socat") + rf"{_ARGS}\b(?:exec|system|pty):",
            _SHELLS + r"\s+-i\s*[<>]",
            _cmd("mkfifo", "mknod") + r"[^\n]*\b(?:nc|ncat|netcat|telnet|openssl|socat)\b",
            r"\b(?:python[0-9.]*|perl|ruby|php|node|lua)\b[^\n]*\b(?:socket|fsockopen|TCPSocket|net\.connect)\b"
            r"[^\n]*(?:spawn|exec|popen|system|subprocess|dup2|/bin/(?:ba)?sh|\bsh\b)",
            r"\bpty\.spawn\b",
            _cmd("telnet") + rf"{_ARGS}\|",
            _cmd("xterm") + rf"{_ARGS}-display\s",
        ],
    ),
    _group(
        "data-exfiltration",
        "data exfiltration",
        Risk.HIGH,
        [
            _cmd("curl")
            + rf"{_ARGS}\s(?:-d|--data(?:-binary|-raw|-urlencode|-ascii)?|-F|--form)\s*=?\s*\S*@",
            _cmd("curl") + rf"{_ARGS}\s(?:-T|--upload-file)\s",
            _cmd("wget") + rf"{_ARGS}--(?:post|body)-(?:file|data)",
            r"\|\s*(?:[\w./-]*/)?(?:curl|wget|nc|ncat|netcat|socat|telnet)" + _END,
            r"\|\s*(?:[\w./-]*/)?openssl\s+s_client",
            _cmd("nc", "ncat", "netcat") + rf"{_ARGS}<",
            _cmd("scp", "sftp", "ftp", "tftp"),
            _cmd("rsync") + rf"{_ARGS}\s\S*[\w\]]:\S*",
            _cmd("dig", "nslookup", "host") + rf"{_ARGS}\$\(",
        ],
    ),
    _group(
        "code-injection",
        "code injection",
        Risk.HIGH,
        [
            r"\|\s*(?:[\w./-]*/)?(?:env\s+)?(?:sudo\s+)?" + _SHELLS + r"(?=$|[\s;&|)])(?!\s+[\w./-]+\.sh\b)",
            r"\|\s*(?:[\w./-]*/)?(?:python[0-9.]*|perl|ruby|node|php|lua)(?:\s+-)?\s*(?=$|[;&|)])",
            _cmd("eval"),
            _SHELLS + r"\s+-c\s+\$\(",
            _SHELLS + r"\s+-c\s+['\"]?\$\{?\w",  # a shell running whatever a variable holds
            r"(?:" + _SHELLS + r"|source|\.)\s+<\(",
            _cmd("source", r"\.") + r"\s+/dev/stdin",
            r"\b(?:python[0-9.]*|perl|ruby|node|php)\s+-[a-zA-Z]*[ce]\s[^\n]*\b(?:exec|eval|compile|__import__)\s*\(",
            r"\b(?:curl|wget)\b[^\n]*&&\s*(?:" + _SHELLS + r"|python[0-9.]*|perl|chmod\s+\+x)\b",
        ],
    ),
    _group(
        "privilege-escalation",
        "privilege escalation",
        Risk.CRITICAL,
        [
            _cmd("sudo", "su", "doas", "pkexec", "runuser", "setpriv", "newgrp", "sg", "chroot"),
            _cmd("chmod") + rf"{_ARGS}\s(?:[ugoa]*[+=][rwxXt]*s|[0-7]?[2-7][0-7]{{3}})(?=\s)",
            _cmd(
                "setcap",
                "visudo",
                "passwd",
                "chpasswd",
                "useradd",
                "adduser",
                "usermod",
                "groupadd",
                "gpasswd",
            ),
            _cmd("chown") + rf"{_ARGS}\s(?:root|0)(?::\S*)?\s",
            _WRITE_TO + r"/etc/(?:passwd|shadow|group|gshadow|sudoers)",
            r"/etc/sudoers",
        ],
    ),
    _group(
        "dangerous-paths",
        "writes to system paths",
        Risk.HIGH,
        [
            _WRITE_TO + r"/(?:etc|boot|bin|sbin|lib\w*|usr|opt|root|var/lib|sys|proc)/",
            r"/proc/sysrq-trigger",
            r"/dev/(?:mem|kmem|port)\b",
            _cmd("cp", "mv", "ln", "install", "rsync")
            + rf"{_ARGS}\s/(?:etc|boot|bin|sbin|lib\w*|usr|root)(?:/\S*)?\s*(?=$|[;&|])",
            _cmd("sed") + rf"{_ARGS}\s-i{_ARGS}\s/(?:etc|boot|bin|sbin|lib\w*|usr)/",
            _cmd("rm", "truncate", "shred") + rf"{_ARGS}\s/(?:etc|boot|bin|sbin|lib\w*|usr)/",
            r"/etc/ld\.so\.preload",
        ],
    ),
    _group(
        "env-injection",
        "environment injection",
        Risk.HIGH,
        [
            r"(?:^|(?<=[\s;&|(]))(?:export\s+|env\s+)?(?:LD_PRELOAD|LD_LIBRARY_PATH|LD_AUDIT|BASH_ENV|ENV|"
            r"PROMPT_COMMAND|IFS|PS4|SHELLOPTS|BASHOPTS|GCONV_PATH|PYTHONSTARTUP|PYTHONHOME|PERL5OPT|PERL5LIB|"
            r"RUBYOPT|NODE_OPTIONS|GIT_SSH_COMMAND|GIT_EXEC_PATH|GIT_CONFIG_\w+|HOSTALIASES|MALLOC_\w+)\s*=",
            r"(?:^|(?<=[\s;&|(]))(?:export\s+|env\s+)?PATH\s*=(?!\s*\$\{?PATH\b)",
            r"\bexport\s+-f\b",
        ],
    ),
    _group(
        "container-escape",
        "container or sandbox escape",
        Risk.CRITICAL,
        [
            _cmd(
                "nsenter",
                "unshare",
                "pivot_root",
                "mount",
                "umount",
                "docker",
                "podman",
                "ctr",
                "crictl",
                "kubectl",
                "lxc",
                r"lxc-\w+",
                "runc",
                "capsh",
                "firejail",
                "bwrap",
                "systemd-nspawn",
                "insmod",
                "rmmod",
                "modprobe",
                "kexec",
                "debugfs",
            ),
            r"/(?:var/)?run/(?:docker|containerd|podman)\S*\.sock",
            r"/proc/(?:1|self|\d+)/(?:root|ns|cwd|mem|exe)\b",
            r"\b(?:release_agent|notify_on_release|core_pattern)\b",
            r"/sys/(?:kernel|fs/cgroup)/",
        ],
    ),
    _group(
        "crypto-mining",
        "cryptocurrency mining",
        Risk.HIGH,
        [
            _cmd(
                "xmrig",
                "minerd",
                "cpuminer",
                "ethminer",
                "cgminer",
                "bfgminer",
                "nbminer",
                "t-rex",
                "lolminer",
                "phoenixminer",
                "nanominer",
                "xmr-stak",
                "ccminer",
            ),
            r"stratum\+(?:tcp|ssl|tls)://",
            r"--donate-level\b",
            r"\b(?:cryptonight|randomx|nicehash|monero(?:ocean)?|minexmr|2miners|nanopool)\b",
        ],
        flags=re.IGNORECASE,
    ),
    _group(
        "network-recon",
        "network reconnaissance",
        Risk.MEDIUM,
        [
            _cmd(
                "nmap",
                "masscan",
                "zmap",
                "arp-scan",
                "netdiscover",
                "nikto",
                "hping3",
                "tcpdump",
                "tshark",
                "ettercap",
                "fping",
                "unicornscan",
                "zgrab",
                "dnsrecon",
                "dnsenum",
                "enum4linux",
                "responder",
                "bettercap",
                "p0f",
            ),
            _cmd("nc", "ncat", "netcat") + rf"{_ARGS}\s-[a-zA-Z]*z",
            _cmd("ping") + rf"{_ARGS}\s-[a-zA-Z]*b",
            r"\bfor\b[^\n]*\bdo\b[^\n]*\b(?:ping|nc)\b",
        ],
    ),
    _group(
        "package-install",
        "package installation",
        Risk.MEDIUM,
        [
            _cmd("apt", "apt-get", "aptitude")
            + r"\s+(?:-\S+\s+)*"
            + r"(?:install|reinstall|remove|purge|upgrade|dist-upgrade|full-upgrade|autoremove)\b",
            _cmd("dpkg") + rf"{_ARGS}\s(?:-i|--install|-r|--remove|-P|--purge|--unpack)\b",
            _cmd("pip", r"pip[0-9.]+", "pipx", "uv") + r"\s+(?:pip\s+)?(?:install|uninstall)\b",
            r"\bpython[0-9.]*\s+-m\s+pip\s+(?:install|uninstall)\b",
            _cmd("npm", "pnpm") + r"\s+(?:-\S+\s+)*(?:i|install|add|ci|uninstall|remove)\b",
            _cmd("yarn") + r"\s+(?:global\s+)?(?:add|remove)\b",
            _cmd("gem", "cargo", "snap", "flatpak", "brew", "conda", "mamba", "opkg")
            + r"\s+(?:install|uninstall|remove)\b",
            _cmd("go") + r"\s+(?:install|get)\b",
            _cmd("apk") + r"\s+(?:add|del)\b",
            _cmd("yum", "dnf", "zypper") + r"\s+(?:install|remove|erase|update|upgrade)\b",
            _cmd("pacman") + r"\s+-[A-Za-z]*[SUR]",
            _cmd("rpm") + r"\s+-[a-zA-Z]*[iUe]",
        ],
        action="approve",
    ),
    _group(
        "persistence",
        "persistence",
        Risk.HIGH,
        [
            _cmd("crontab") + rf"(?!{_ARGS}\s-l\b)",
            r"/etc/cron|/var/spool/cron|@reboot\b",
            _cmd("systemctl")
            + r"\s+(?:--\S+\s+)*"
            + r"(?:enable|link|edit|set-default|daemon-reload|preset|mask|unmask|reenable|revert)\b",
            r"/etc/systemd/|\.config/systemd/|/lib/systemd/system/",
            r"/etc/init\.d/|/etc/rc\.local|\bupdate-rc\.d\b",
            _WRITE_TO
            + r"\S*\.(?:bashrc|bash_profile|bash_login|profile|zshrc|zprofile|xinitrc|xsessionrc)\b",
            r"\b(?:cp|mv|ln|install)\b[^\n]*\.(?:bashrc|bash_profile|profile|zshrc)\b",
            r"authorized_keys",
            _cmd("at", "batch") + r"\s+(?:now|midnight|noon|teatime|tomorrow|\d)",
            r"/etc/(?:profile|environment|xdg/autostart|udev/rules\.d)|\.config/autostart",
        ],
    ),
    _group(
        "process-control",
        "stopping processes or the system",
        Risk.MEDIUM,
        [
            _cmd("kill") + rf"{_ARGS}\s(?:-1|1)(?=$|[\s;&|])",
            _cmd("kill") + rf"{_ARGS}\$\{{?PPID\b",
            _cmd("killall", "killall5", "pkill", "shutdown", "reboot", "poweroff", "halt", "telinit"),
            _cmd("init") + r"\s+[0-6sS]\b",
            _cmd("systemctl")
            + r"\s+(?:--\S+\s+)*"
            + r"(?:stop|kill|restart|poweroff|reboot|halt|isolate|rescue|emergency|suspend|hibernate)\b",
        ],
    ),
    _group(
        "env-dump",
        "dumping the environment",
        Risk.MEDIUM,
        [
            _cmd("printenv"),
            _cmd("env") + r"(?:\s+(?:-0|--null|-u\s+\S+))*\s*(?=$|[;&|>)])",
            _cmd("set", "export") + r"(?:\s+-p)?\s*(?=$|[;&|>)])",
            _cmd("declare", "typeset") + r"\s+-[a-zA-Z]*[px]\s*(?=$|[;&|>)])",
            _cmd("compgen") + r"\s+-[a-zA-Z]*[ve]",
            r"/proc/[^\s/]+/environ",
            r"(?i:\$\{?[a-z_]*(?:api_?key|token|secret|passw(?:or)?d|credential)[a-z_]*\}?)",
        ],
    ),
    _group(
        "filter-bypass",
        "obfuscated commands",
        Risk.HIGH,
        [
            r"\bbase(?:32|64)\s+(?:-\w*d\w*|--decode)\b[^\n]*\|",
            r"(?:\$\(|`)[^)`]*\bbase(?:32|64)\s+(?:-\w*d\w*|--decode)\b",
            r"\bxxd\s+-[a-zA-Z]*r",
            r"\b(?:printf|echo\s+-e)\s+['\"]?[^'\"\s]*(?:\\(?:x[0-9a-fA-F]{1,2}|[0-7]{3})){2,}",
            r"\$'[^']*\\(?:x[0-9a-fA-F]|[0-7]{1,3}|u[0-9a-fA-F]|U[0-9a-fA-F])",
            r"\$\{?IFS\b",
            r"\$\{\w+:(?:\d| +-?\d)",  # ${PATH:0:1}; not the ordinary default ${x:-2}
            r"\$\{!\w+",
            r"[A-Za-z](?:''|\"\")+[A-Za-z]",
            r"(?:^|[;&|(]\s*)(?:[\w./-]*[?*\[])+[\w./?*\[\]-]*(?=\s|$)",  # a glob as the program name
            r"(?:^|[;&|(]\s*)\S*[^\x00-\x7f]\S*",  # a non-ASCII program name
            r"\brev\b[^\n]*\|\s*(?:" + _SHELLS + r"|eval)\b",
            # The program name taken from a variable or a command substitution: `a=rm; $a -rf /`,
            # `$(printf 'rm -rf /')`. Whatever it runs, no pattern can see it.
            r"(?:^|[;&|(\n]|\b(?:then|do|else|exec|command|env|nice|nohup|time)\s)\s*"
            r"(?:[A-Za-z_]\w*=\S*\s+)*(?:\$[\w{(]|`)",
            _cmd("alias") + r"\s+[^\s=]+=",  # an alias is a program name we cannot see through
            _cmd("env") + rf"{_ARGS}\s(?:-[a-zA-Z]*S|--split-string)",  # env -S re-splits a string
        ],
    ),
)

_BY_NAME = {g.name: g for g in DENY_GROUPS}


@functools.cache
def _rm_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """An rm command with its arguments, and a word that asks for recursion (compiled on first use)."""
    return re.compile(_cmd("rm") + rf"({_ARGS})"), re.compile(_RM_RECURSIVE)


def canonical_group(name: str) -> str | None:
    """The group's name as we spell it (config may use `_` for `-`), or None if there is no such group."""
    key = name.strip().lower().replace("_", "-")
    return key if key in _BY_NAME else None


class DenyList:
    """The deny groups with per-group on/off switches.

    `workspace`: the workspace directory (as configured and as its real path). Commands run in it
    with `HOME` set to it, so `destructive-ops` also refuses a recursive `rm` of the workspace or
    of any directory holding it (`rm -rf /var/lib` when the workspace is
    `/var/lib/edgeclaw/workspace`), however the path is written (relative, `~/..`, a glob).
    """

    def __init__(self, switches: Mapping[str, bool] | None = None, workspace: Iterable[str] = ()) -> None:
        self.enabled: frozenset[str] = frozenset(
            g.name for g in DENY_GROUPS if (switches or {}).get(g.name, True)
        )
        roots = [posixpath.normpath(str(w)) for w in workspace if str(w).startswith("/")]
        self.workspace = roots[0] if roots else ""
        protected: dict[tuple[str, ...], None] = {}
        for root in roots:
            parts = tuple(x for x in root.split("/") if x)
            for n in range(len(parts) + 1):
                protected[parts[:n]] = None
        self._protected = tuple(protected)

    @staticmethod
    def resolve_switches(*layers: Mapping[str, bool]) -> dict[str, bool]:
        """Merge switch tables, later layers winning; unknown names raise ValueError."""
        merged: dict[str, bool] = {}
        for layer in layers:
            for name, on in layer.items():
                canonical = canonical_group(name)
                if canonical is None:
                    known = ", ".join(g.name for g in DENY_GROUPS)
                    raise ValueError(f"unknown deny group {name!r} (known: {known})")
                merged[canonical] = bool(on)
        return merged

    def check(self, command: str) -> list[DenyHit]:
        """Every enabled group that matches the (already normalised) command, in catalogue order."""
        views = analysis_views(command)
        hits: list[DenyHit] = []
        for group in DENY_GROUPS:
            if group.name not in self.enabled:
                continue
            hit = _first_match(group, views)
            if hit is None and group.name == "destructive-ops" and self._protected:
                hit = next((h for v in views if (h := self._removes_workspace(v))), None)
            if hit is not None:
                hits.append(DenyHit(group, hit))
        return hits

    def _removes_workspace(self, view: str) -> str | None:
        """A recursive rm whose target is the workspace or a directory that holds it."""
        rm_command, rm_recursive_word = _rm_patterns()
        for m in rm_command.finditer(view):
            words = m.group(1).split()
            if not any(rm_recursive_word.match(w) for w in words if w.startswith("-")):
                continue
            options_done = False
            for word in words:
                if word == "--" and not options_done:
                    options_done = True
                    continue
                if word.startswith("-") and not options_done:
                    continue
                if self._protects(word):
                    return m.group(0).strip()[:80]
        return None

    def _protects(self, target: str) -> bool:
        home = self.workspace
        if target == "~" or target.startswith("~/"):
            target = home + target[1:]
        else:
            target = re.sub(r"^\$(?:HOME\b|\{HOME\})", home, target)
        if target.startswith("$"):
            return False  # another variable: the program-from-a-variable rules see what they can
        path = posixpath.normpath(posixpath.join(home, target))
        parts = tuple(x for x in path.split("/") if x)
        if not any(c in path for c in "*?["):
            return parts in self._protected
        # A glob: refused when it can match the workspace or a directory holding it, or when it is
        # everything in the workspace (`rm -rf ./*` is refused as `*` is).
        if parts[-1:] == ("*",) and "/" + "/".join(parts[:-1]) == self.workspace:
            return True
        return any(
            len(p) == len(parts) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(p, parts, strict=True))
            for p in self._protected
        )


def _first_match(group: DenyGroup, views: tuple[str, ...]) -> str | None:
    for view in views:
        for pattern in group.patterns:
            m = pattern.search(view)
            if m is not None:
                return (m.group(0).strip() or view.strip())[:80]
    return None
