"""cgroups for sandboxed commands: a process cap per command, a memory bound for all of them, a sure kill.

RLIMIT_NPROC is not enforced by the kernel for root (nor for a process with
CAP_SYS_ADMIN or CAP_SYS_RESOURCE), and for other users it counts every
process of that user, the daemon's threads included; RLIMIT_AS bounds one
process, so six children of 400 MiB each still take 2.4 GiB. cgroups do
better: each command gets its own cgroup with `pids.max`, and all commands of
one edgeclaw process share a parent with `memory.max` (and no swap), so the
kernel's OOM killer ends a command when their total is reached and the rest of
the board never notices. A cgroup also gives a reliable kill: every process in
it, including ones that left the process group with setsid, can be found.

    <top>/edgeclaw-sandbox/                   one per machine (or per delegated service)
        run-<pid>-<starttime>-<n>/            one per Sandbox of one edgeclaw process: memory.max
            cmd-<hex>/                        one per command: pids.max, memory.oom.group

The run directory names the process that made it (pid and start time, so a
reused pid is not mistaken for it): a daemon that was SIGKILLed leaves its
commands and directories behind, and the next edgeclaw process that starts
ends the processes in them and removes them (`end_leftovers`).

Where `<top>` is (`sandbox.pids_cgroup`):
  "auto"  cgroup v2: the daemon's own cgroup when systemd delegates it
          (`Delegate=`; the daemon then moves itself into a leaf beside the
          sandbox, as the "no internal processes" rule demands), else
          `/sys/fs/cgroup` when writable (root); cgroup v1: the daemon's own
          cgroup in the pids and the memory hierarchy, when writable;
  ""      none;
  a path  a writable cgroup directory to use as `edgeclaw-sandbox` itself
          (v1: in the pids hierarchy; the same path in the memory hierarchy
          is used when it exists).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import itertools
import logging
import os
import re
import signal
import time
from pathlib import Path

from edgeclaw.records import dataclass

log = logging.getLogger("edgeclaw.sandbox")

CGROUP_ROOT = Path("/sys/fs/cgroup")
TOP_NAME = "edgeclaw-sandbox"
# Where a daemon in a delegated v2 cgroup moves itself, so that its cgroup may have controllers.
DAEMON_LEAF = "edgeclaw-daemon"
RUN_PREFIX = "run-"
_RUN_NAME = re.compile(r"^run-(\d+)-(\d+)-\d+$")
# A command's cgroup straight under the top directory (the layout before run directories), as a board
# upgraded in place may still have: ended at start-up like a run directory.
_OLD_CMD_NAME = re.compile(r"^cmd-(\d+)-[0-9a-f]+$")
_run_numbers = itertools.count(1)


def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), None when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return int(stat.rpartition(")")[2].split()[19])
    except (IndexError, ValueError):
        return None


def owner_alive(pid: int, start_time: int | None) -> bool:
    """Whether the process that named a cgroup is still running (and is that process, not a reused pid)."""
    now = process_start_time(pid)
    if now is None:
        return False
    return start_time is None or now == start_time


def own_cgroups(proc_file: Path = Path("/proc/self/cgroup")) -> dict[str, str]:
    """This process's cgroup per hierarchy: "" for the v2 one, else each v1 controller's name."""
    out: dict[str, str] = {}
    try:
        lines = proc_file.read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if not controllers:
            out[""] = path
        for name in controllers.split(","):
            if name:
                out[name] = path
    return out


def _writable(cgroup_dir: Path) -> bool:
    return os.access(cgroup_dir, os.W_OK | os.X_OK)


def _under(mount: Path, rel: str) -> Path:
    return mount / rel.lstrip("/") if rel.strip("/") else mount


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _read_keyed(path: Path, key: str) -> int:
    """The value of `key` in a file of `key value` lines (memory.events, pids.events), 0 when absent."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _kill_procs(procs_file: Path) -> int:
    """SIGKILL every process listed in a cgroup.procs file, a few rounds (a process may fork meanwhile)."""
    killed: set[int] = set()
    for _ in range(20):
        try:
            pids = [int(x) for x in procs_file.read_text().split()]
        except (OSError, ValueError):
            pids = []
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        time.sleep(0.01)
    return len(killed)


def _kill_cgroup(path: Path, v2: bool) -> int:
    """Kill everything in one cgroup: v2's cgroup.kill does it atomically, else a bounded loop."""
    count = len(_pids_in(path))
    if v2 and (path / "cgroup.kill").exists():
        try:
            _write(path / "cgroup.kill", "1")
            return count
        except OSError:
            pass
    return max(count, _kill_procs(path / "cgroup.procs"))


def _pids_in(path: Path) -> list[int]:
    try:
        return [int(x) for x in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _rmdir_when_empty(path: Path, v2: bool, tries: int = 50) -> bool:
    """Remove a cgroup; killed processes may take a moment to leave it. True when it is gone."""
    for _ in range(tries):
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as e:
            if e.errno != errno.EBUSY:
                log.warning("cannot remove cgroup %s: %s", path, e.strerror)
                return False
            _kill_cgroup(path, v2)
            time.sleep(0.02)
    log.warning("cgroup %s still busy; left behind", path)
    return False


# -- where the cgroups go ---------------------------------------------------------------------


@dataclass(frozen=True)
class CgroupLayout:
    """The `edgeclaw-sandbox` directories: one for v2 (pids and memory), one per hierarchy for v1."""

    v2: bool
    pids_top: Path
    memory_top: Path | None  # None when the memory controller is not available there
    how: str  # in words, for the log and `doctor`


_LAYOUTS: dict[str, CgroupLayout | None] = {}
_LAYOUT_REASONS: dict[str, str] = {}


def find_layout(setting: str = "auto") -> CgroupLayout | None:
    """Where this process's sandbox cgroups go for `setting`, or None. Decided once per process.

    Once per process because deciding may move the process itself (a delegated v2 cgroup):
    a second look would find the leaf it moved into.
    """
    if setting not in _LAYOUTS:
        layout, why = _decide(setting)
        _LAYOUTS[setting] = layout
        _LAYOUT_REASONS[setting] = why
        if layout is None and setting:
            log.info("no cgroup for sandboxed commands: %s", why)
    return _LAYOUTS[setting]


def memory_in_use(setting: str = "auto") -> int | None:
    """Bytes charged to all sandboxed commands' cgroups together, once a command has found them (None
    before, or without a memory controller). Never looks for them itself: that may move this process."""
    layout = _LAYOUTS.get(setting)
    if layout is None or layout.memory_top is None:
        return None
    return _read_int(layout.memory_top / ("memory.current" if layout.v2 else "memory.usage_in_bytes"))


def layout_reason(setting: str) -> str:
    """Why `find_layout(setting)` found nothing (or how it found what it did)."""
    find_layout(setting)
    layout = _LAYOUTS.get(setting)
    return layout.how if layout is not None else _LAYOUT_REASONS.get(setting, "")


def _decide(setting: str) -> tuple[CgroupLayout | None, str]:
    if not setting:
        return None, "sandbox.pids_cgroup is empty"
    if setting != "auto":
        return _explicit(Path(setting))
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return _auto_v2()
    return _auto_v1()


def _controllers(cgroup_dir: Path) -> set[str]:
    try:
        return set((cgroup_dir / "cgroup.controllers").read_text().split())
    except OSError:
        return set()


def _enable(cgroup_dir: Path, wanted: set[str]) -> set[str]:
    """Turn on `wanted` controllers for the children of `cgroup_dir`; returns what its children get."""
    for name in sorted(wanted & _controllers(cgroup_dir)):
        with contextlib.suppress(OSError):
            _write(cgroup_dir / "cgroup.subtree_control", f"+{name}")
    try:
        return set((cgroup_dir / "cgroup.subtree_control").read_text().split())
    except OSError:
        return set()


def _make_writable(cgroup_dir: Path) -> str | None:
    """Create `cgroup_dir` unless it is there; what stands in the way of writing into it, else None."""
    try:
        cgroup_dir.mkdir(exist_ok=True)
    except OSError as e:
        return f"cannot create {cgroup_dir}: {e.strerror}"
    if not _writable(cgroup_dir):
        return f"{cgroup_dir} is not writable by this user"
    return None


def _v2_layout(top: Path, wanted: set[str], how: str) -> tuple[CgroupLayout | None, str]:
    """`top` made, with pids (required) and memory (when among `wanted`) turned on for its children."""
    problem = _make_writable(top)
    if problem is not None:
        return None, problem
    inner = _enable(top, wanted)
    if "pids" not in inner:
        return None, f"cannot enable the pids controller in {top}"
    memory = top if "memory" in inner else None
    return CgroupLayout(True, top, memory, how), how


def _v2_top(parent: Path, how: str) -> tuple[CgroupLayout | None, str]:
    """`parent/edgeclaw-sandbox` with pids (required) and memory (when there) for its children."""
    given = _enable(parent, {"pids", "memory"})
    if "pids" not in given:
        return None, f"the pids controller is not available for children of {parent}"
    return _v2_layout(parent / TOP_NAME, given & {"pids", "memory"}, how)


def _delegated(own: Path) -> bool:
    """Whether systemd delegated our own v2 cgroup to us (`Delegate=`): we may manage its subtree."""
    if not own.is_dir() or own == CGROUP_ROOT:
        return False
    if os.geteuid() != 0:
        # An unprivileged process can write a cgroup's files only when they were handed to it.
        return all(os.access(own / name, os.W_OK) for name in ("cgroup.procs", "cgroup.subtree_control"))
    for attr in ("trusted.delegate", "user.delegate"):
        with contextlib.suppress(OSError):
            if os.getxattr(own, attr) == b"1":
                return True
    return False


def _service_cgroup(own: Path) -> Path:
    """The cgroup the sandbox goes into, for a process in the v2 cgroup `own`.

    A process already in the daemon's leaf (a daemon that set the delegated cgroup up, or a
    process it started) has the sandbox beside it, and nothing to move.
    """
    return own.parent if own.name == DAEMON_LEAF else own


def _move_self_to_leaf(own: Path) -> str | None:
    """Leave the delegated cgroup for a leaf inside it, so that it may have controllers; None when done."""
    if not _pids_in(own):
        return None
    leaf = own / DAEMON_LEAF
    try:
        leaf.mkdir(exist_ok=True)
        _write(leaf / "cgroup.procs", str(os.getpid()))  # the whole process, all its threads
    except OSError as e:
        return f"cannot move the daemon into {leaf}: {e.strerror}"
    others = _pids_in(own)
    if others:
        return f"{own} holds other processes ({len(others)}), so it cannot delegate controllers"
    return None


def _auto_v2() -> tuple[CgroupLayout | None, str]:
    rel = own_cgroups().get("")
    if rel is not None:
        own = _under(CGROUP_ROOT, rel)
        base = _service_cgroup(own)
        delegated = _delegated(base)
        log.debug("cgroup v2: this process is in %s; delegated to it: %s", own, delegated)
        if delegated:
            problem = _move_self_to_leaf(base) if base == own else None
            if problem is None:
                return _v2_top(base, f"cgroup v2, delegated to the service ({base})")
            log.warning("delegated cgroup not usable: %s", problem)
    if os.geteuid() == 0 and os.access(CGROUP_ROOT, os.W_OK):
        return _v2_top(CGROUP_ROOT, f"cgroup v2 ({CGROUP_ROOT / TOP_NAME})")
    return None, (
        "cgroup v2 is not writable by this user and the service's cgroup is not delegated "
        "(systemd: Delegate=pids memory)"
    )


def _v1_top(controller: str) -> Path | None:
    mount = CGROUP_ROOT / controller
    if not (mount / "cgroup.procs").exists():
        return None
    top = _under(mount, own_cgroups().get(controller, "/")) / TOP_NAME
    # It may be there already, made by root: only one we may write into is of use.
    return top if _make_writable(top) is None else None


def _auto_v1() -> tuple[CgroupLayout | None, str]:
    pids = _v1_top("pids")
    if pids is None:
        return None, "no writable cgroup v1 pids hierarchy"
    memory = _v1_top("memory")
    if memory is not None:
        # Limits set on a parent hold for its children only in hierarchical mode (always, in newer kernels).
        with contextlib.suppress(OSError):
            if (memory / "memory.use_hierarchy").read_text().strip() != "1":
                _write(memory / "memory.use_hierarchy", "1")
    return CgroupLayout(False, pids, memory, f"cgroup v1 ({pids})"), f"cgroup v1 ({pids})"


def _on_v2(path: Path) -> bool:
    """Whether an operator-given cgroup directory (there or still to be made) is on cgroup v2."""
    return (path.parent / "cgroup.controllers").exists() or (path / "cgroup.controllers").exists()


def _v1_memory_twin(pids_path: Path) -> Path | None:
    """The same place in the v1 memory hierarchy as `pids_path` in the pids one (None outside it)."""
    pids_mount = CGROUP_ROOT / "pids"
    if not pids_path.is_relative_to(pids_mount):
        return None
    return CGROUP_ROOT / "memory" / pids_path.relative_to(pids_mount)


def _explicit(path: Path) -> tuple[CgroupLayout | None, str]:
    if _on_v2(path):
        _enable(path.parent, {"pids", "memory"})
        return _v2_layout(path, {"pids", "memory"}, f"cgroup v2 ({path})")
    problem = _make_writable(path)
    if problem is not None:
        return None, problem
    memory_top: Path | None = None
    twin = _v1_memory_twin(path)
    if twin is not None:
        with contextlib.suppress(OSError):
            twin.mkdir(exist_ok=True)
            memory_top = twin if _writable(twin) else None
    return CgroupLayout(False, path, memory_top, f"cgroup v1 ({path})"), f"cgroup v1 ({path})"


# -- one command's cgroup ----------------------------------------------------------------------


class CommandCgroup:
    """One command's cgroup (v1: one per hierarchy): join it, read its counters, kill all in it, remove it."""

    def __init__(self, pids_dir: Path, memory_dir: Path | None, v2: bool) -> None:
        self.pids_dir = pids_dir
        self.memory_dir = memory_dir
        self.v2 = v2

    @property
    def dirs(self) -> list[Path]:
        extra = [self.memory_dir] if self.memory_dir is not None and self.memory_dir != self.pids_dir else []
        return [self.pids_dir, *extra]

    @property
    def procs_files(self) -> list[Path]:
        """Where the command's first process writes its pid to join (one file per v1 hierarchy)."""
        return [d / "cgroup.procs" for d in self.dirs]

    def pids(self) -> list[int]:
        return _pids_in(self.pids_dir)

    def fork_failures(self) -> int:
        """How many forks the limit refused so far (pids.events `max`)."""
        return _read_keyed(self.pids_dir / "pids.events", "max")

    def oom_kills(self) -> int:
        """How many of the command's processes the OOM killer ended."""
        if self.memory_dir is None:
            return 0
        if self.v2:
            return _read_keyed(self.memory_dir / "memory.events", "oom_kill")
        return _read_keyed(self.memory_dir / "memory.oom_control", "oom_kill")

    def kill(self) -> None:
        """SIGKILL every process in the cgroup; v2 does it atomically, v1 in a bounded loop."""
        for d in self.dirs:
            _kill_cgroup(d, self.v2)

    def remove(self) -> None:
        """Remove the (emptied) cgroup directories."""
        for d in self.dirs:
            _rmdir_when_empty(d, self.v2)


class SandboxCgroups:
    """The run directory of one Sandbox in this process: the memory bound, and a cgroup per command."""

    def __init__(self, layout: CgroupLayout, run_dir: Path, memory_run: Path | None, memory_max: int) -> None:
        self.layout = layout
        self.run_dir = run_dir
        self.memory_run = memory_run  # v2: run_dir itself, when it has the memory controller
        self.memory_max = memory_max  # bytes for all commands together; 0 = not bounded here
        self.v2 = layout.v2

    @classmethod
    def find(cls, setting: str = "auto", memory_max: int = 0) -> SandboxCgroups | None:
        """A usable run directory for `setting`, bounded to `memory_max` bytes (0: no bound), or None."""
        layout = find_layout(setting)
        if layout is None:
            return None
        try:
            try:
                return cls._make(layout, memory_max)
            except FileNotFoundError:
                # Another edgeclaw process that ended removed the empty edgeclaw-sandbox meanwhile:
                # make it again (with its controllers) and try once more.
                _LAYOUTS.pop(setting, None)
                layout = find_layout(setting)
                if layout is None:
                    return None
                return cls._make(layout, memory_max)
        except OSError as e:
            where = layout.pids_top if layout is not None else setting
            log.warning("cannot set up sandbox cgroups under %s: %s", where, e.strerror or e)
            return None

    @classmethod
    def _make(cls, layout: CgroupLayout, memory_max: int) -> SandboxCgroups:
        start = process_start_time(os.getpid()) or 0
        name = f"{RUN_PREFIX}{os.getpid()}-{start}-{next(_run_numbers)}"
        run_dir = layout.pids_top / name
        run_dir.mkdir()
        _forget_at_exit(run_dir, layout.v2)
        memory_run: Path | None = None
        try:
            if layout.v2:
                inner = _enable(run_dir, {"pids", "memory"})
                if "pids" not in inner:
                    raise OSError(errno.ENOTSUP, f"no pids controller for children of {run_dir}")
                memory_run = run_dir if "memory" in inner else None
            elif layout.memory_top is not None:
                memory_run = layout.memory_top / name
                memory_run.mkdir()
                _forget_at_exit(memory_run, False)
            if memory_run is not None and memory_max > 0:
                _set_memory_max(memory_run, memory_max, layout.v2)
            made = cls(layout, run_dir, memory_run, memory_max if memory_run is not None else 0)
            made.create(8).remove()  # prove a command cgroup can be made and its limit set
        except OSError:
            _rmdir_quietly(run_dir, memory_run)
            raise
        return made

    @property
    def bounds_memory(self) -> bool:
        return self.memory_max > 0

    @property
    def bounds_commands_memory(self) -> bool:
        """Whether a command's own cgroup can bound its memory (`create(memory_max=...)`)."""
        return self.memory_run is not None

    def create(self, max_pids: int, memory_max: int = 0) -> CommandCgroup:
        """A command's cgroup: at most `max_pids` processes, and `memory_max` bytes of memory (no swap)
        when given and a memory controller is there (within the run's bound for all commands)."""
        import secrets  # on first use, not at start

        name = f"cmd-{secrets.token_hex(4)}"
        pids_dir = self.run_dir / name
        pids_dir.mkdir()
        memory_dir: Path | None = None
        try:
            _write(pids_dir / "pids.max", str(max_pids))
            if self.memory_run is not None:
                if self.v2:
                    memory_dir = pids_dir
                    # The OOM killer ends the whole command, not one process of it: what is left of
                    # a command that lost a process is rarely of use, and it would be hit again.
                    with contextlib.suppress(OSError):
                        _write(pids_dir / "memory.oom.group", "1")
                else:
                    memory_dir = self.memory_run / name
                    memory_dir.mkdir()
                if memory_max > 0:
                    _set_memory_max(memory_dir, memory_max, self.v2)
        except OSError:
            _rmdir_quietly(memory_dir, pids_dir)
            raise
        return CommandCgroup(pids_dir, memory_dir, self.v2)

    def memory_peak(self) -> int | None:
        """The most memory all commands together have used, in bytes (None when not known)."""
        if self.memory_run is None:
            return None
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        return _read_int(self.memory_run / name)

    def close(self) -> None:
        """Kill what is left and remove the run directories."""
        for d in (self.run_dir, self.memory_run):
            if d is not None and d.exists():
                _end_run_dir(d, self.v2)


def _rmdir_quietly(*dirs: Path | None) -> None:
    """Undo a half-made cgroup: remove each directory given that is there and empty."""
    for d in dirs:
        if d is not None:
            with contextlib.suppress(OSError):
                d.rmdir()


def _set_memory_max(cgroup_dir: Path, limit: int, v2: bool) -> None:
    """The memory bound, swap included: commands that reach it are killed, not pushed into swap."""
    if v2:
        _write(cgroup_dir / "memory.max", str(limit))
        with contextlib.suppress(FileNotFoundError):  # absent without swap accounting
            _write(cgroup_dir / "memory.swap.max", "0")
        return
    _write(cgroup_dir / "memory.limit_in_bytes", str(limit))
    with contextlib.suppress(FileNotFoundError):  # memory+swap: absent without swap accounting
        _write(cgroup_dir / "memory.memsw.limit_in_bytes", str(limit))


# -- leaving nothing behind --------------------------------------------------------------------

_AT_EXIT: list[tuple[Path, bool]] = []


def _forget_at_exit(path: Path, v2: bool) -> None:
    if not _AT_EXIT:
        atexit.register(_remove_own_at_exit)
    _AT_EXIT.append((path, v2))


def _remove_own_at_exit() -> None:
    # Deepest first: v1 memory run directories and v2 run directories both hold command cgroups.
    for path, v2 in reversed(_AT_EXIT):
        with contextlib.suppress(OSError):
            if path.exists():
                _end_run_dir(path, v2, tries=5)
    # An empty edgeclaw-sandbox goes too (it may sit in a cgroup someone else wants to remove);
    # one that still holds another process's run directory stays.
    for top in dict.fromkeys(path.parent for path, _ in _AT_EXIT):
        if top.name == TOP_NAME:
            with contextlib.suppress(OSError):
                top.rmdir()


def _end_run_dir(run_dir: Path, v2: bool, tries: int = 50) -> int:
    """Kill everything in a run directory's command cgroups, remove them and it; the number killed."""
    killed = 0
    with contextlib.suppress(OSError):
        for child in list(run_dir.iterdir()):
            if child.is_dir():
                killed += _kill_cgroup(child, v2)
    with contextlib.suppress(OSError):
        for child in list(run_dir.iterdir()):
            if child.is_dir():
                _rmdir_when_empty(child, v2, tries)
    killed += _kill_cgroup(run_dir, v2)
    _rmdir_when_empty(run_dir, v2, tries)
    return killed


def leftover_tops(setting: str = "auto") -> list[tuple[Path, bool]]:
    """Every `edgeclaw-sandbox` directory `setting` may have used, without creating any: (path, v2)."""
    if not setting:
        return []
    if setting != "auto":
        path = Path(setting)
        if _on_v2(path):
            return [(path, True)]
        twin = _v1_memory_twin(path)
        return [(path, False)] + ([(twin, False)] if twin is not None else [])
    own = own_cgroups()
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        tops = [CGROUP_ROOT / TOP_NAME]
        rel = own.get("")
        if rel is not None:
            tops.append(_service_cgroup(_under(CGROUP_ROOT, rel)) / TOP_NAME)
        return [(p, True) for p in dict.fromkeys(tops)]
    return [
        (_under(CGROUP_ROOT / c, own.get(c, "/")) / TOP_NAME, False)
        for c in ("pids", "memory")
        if (CGROUP_ROOT / c / "cgroup.procs").exists()
    ]


def end_leftovers(setting: str = "auto") -> int:
    """End what edgeclaw processes that are gone left in the cgroups: kill it, remove the directories.

    A run directory whose process still runs (another daemon, a `tool call`) is left
    alone. Returns how many processes were killed.
    """
    killed = 0
    for top, v2 in leftover_tops(setting):
        try:
            entries = [p for p in top.iterdir() if p.is_dir()]
        except OSError:
            continue
        for entry in entries:
            run = _RUN_NAME.match(entry.name)
            old = _OLD_CMD_NAME.match(entry.name)
            if run is not None:
                if owner_alive(int(run.group(1)), int(run.group(2))):
                    continue
            elif old is not None:
                if owner_alive(int(old.group(1)), None):
                    continue
            else:
                continue
            n = _end_run_dir(entry, v2) if run is not None else _kill_cgroup(entry, v2)
            if old is not None:
                _rmdir_when_empty(entry, v2)
            killed += n
            if n:
                log.warning("ended %d process(es) left in %s by an edgeclaw process that is gone", n, entry)
            else:
                log.info("removed %s, left by an edgeclaw process that is gone", entry)
        if top.name == TOP_NAME:
            with contextlib.suppress(OSError):
                top.rmdir()  # only when empty; a process about to use it makes it again
    return killed
