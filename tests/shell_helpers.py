"""Helpers shared by the exec, process and custom tool tests: a runtime on a temporary state directory."""

from __future__ import annotations

import asyncio
import fcntl
import grp
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.runtime import Runtime, build_runtime
from edgeclaw.tools.approval import ApprovalRequest, Decision
from edgeclaw.tools.base import ToolContext


def make_runtime(tmp_path: Path, environ: dict[str, str] | None = None, **sections: Any) -> Runtime:
    data: dict[str, Any] = {"board": "sim", "state_dir": str(tmp_path / "state")}
    data.update(sections)
    # The shell tools' tests call as an MQTT client (`ctx()`), which by default gets no shell tools:
    # widen the channel's profile, as an operator would, unless the test sets it itself.
    tools = data.setdefault("tools", {})
    tools.setdefault("channels", {}).setdefault("mqtt", {"profile": "full"})
    config = config_from_dict(data, str(tmp_path / "edgeclaw.toml"))
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    env.update(environ or {})
    return build_runtime(config, environ=env)


class ScriptedApprover:
    """Answers approval questions from a script, recording what it was asked."""

    def __init__(self, *answers: Decision | None, delay: float = 0.0) -> None:
        self.answers = list(answers)
        self.delay = delay
        self.asked: list[ApprovalRequest] = []

    async def ask_approval(self, request: ApprovalRequest) -> Decision | None:
        self.asked.append(request)
        await asyncio.sleep(self.delay)
        return self.answers.pop(0) if self.answers else Decision.DENY


def ctx(
    channel: str = "mqtt", agent: str = "main", session: str = "mqtt:test", caller: str = ""
) -> ToolContext:
    return ToolContext(channel=channel, agent_id=agent, session_key=session, sender="tester", caller=caller)


def marked_processes(marker: str) -> list[int]:
    """Pids whose command line holds `marker` (the `sh -c` wrapper that names it excluded)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline and b"sh\x00-c" not in cmdline:
            found.append(int(entry))
    return found


# -- the unprivileged service user ----------------------------------------------------------
#
# In production the daemon runs as the system user `edgeclaw` with the hardware groups (systemd/
# edgeclaw.service: User=edgeclaw, SupplementaryGroups=i2c spi gpio dialout), not as root. Tests
# that need that act as SERVICE_USER, created (with the groups, where missing) on first use and left
# in place, so that repeated and concurrent runs find it. Setting it up needs root.

SERVICE_USER = "edgeclaw-test"
HARDWARE_GROUPS = ("i2c", "spi", "gpio", "dialout")
REPO = Path(__file__).resolve().parent.parent
# Set in a test run that already acts as the service user, so it does not start another one.
AS_SERVICE_USER_ENV = "EDGECLAW_TESTS_AS_SERVICE_USER"


def service_user_problem() -> str | None:
    """Why the service user cannot be set up here, or None."""
    if os.geteuid() != 0:
        return "acting as the unprivileged service user needs root to set it up"
    for tool in ("setpriv", "useradd", "groupadd", "usermod"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if Path("/etc/firejail/firejail.users").exists():
        return "firejail.users restricts who may use firejail"
    return None


def ensure_service_user() -> pwd.struct_passwd:
    """The service user, a member of every hardware group (made as system groups where missing)."""
    lock_dir = "/run/lock" if os.path.isdir("/run/lock") else "/tmp"
    with open(f"{lock_dir}/edgeclaw-test-user.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for name in HARDWARE_GROUPS:
            try:
                grp.getgrnam(name)
            except KeyError:
                subprocess.run(["groupadd", "--system", name], check=True, capture_output=True)
        try:
            pwd.getpwnam(SERVICE_USER)
        except KeyError:
            subprocess.run(
                ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                 "--shell", "/usr/sbin/nologin", "--user-group", SERVICE_USER],
                check=True,
                capture_output=True,
            )  # fmt: skip
        members = {g for g in HARDWARE_GROUPS if SERVICE_USER in grp.getgrnam(g).gr_mem}
        if members != set(HARDWARE_GROUPS):
            subprocess.run(
                ["usermod", "--append", "--groups", ",".join(HARDWARE_GROUPS), SERVICE_USER],
                check=True,
                capture_output=True,
            )
    return pwd.getpwnam(SERVICE_USER)


def as_service_user(argv: list[str]) -> list[str]:
    """`argv` run as the service user with its groups, as systemd starts the daemon."""
    return ["setpriv", f"--reuid={SERVICE_USER}", f"--regid={SERVICE_USER}", "--init-groups", *argv]


def hardware_gids() -> set[int]:
    return {grp.getgrnam(name).gr_gid for name in HARDWARE_GROUPS}


def _runs_as_service_user(python: str, env: dict[str, str]) -> bool:
    # Tests start sys.executable again (a daemon, a CLI): that must work too, not only the first exec.
    probe = (
        "import subprocess, sys; import edgeclaw, pytest, pytest_asyncio; "
        "subprocess.run([sys.executable, '-c', 'import edgeclaw'], check=True); print('importable')"
    )
    try:
        done = subprocess.run(
            as_service_user([python, "-c", probe]),
            env=env,
            cwd="/",
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return "importable" in done.stdout


def service_user_python(scratch: Path) -> tuple[str, dict[str, str], Path] | str:
    """How to run this checkout's Python code as the service user: (interpreter, environment, checkout).

    The venv's interpreter may live where the service user cannot reach it (a pyenv under /root),
    and so may the checkout: then a system interpreter of the same version runs a copy made in
    `scratch`. Returns why not, as a string, when nothing works.
    """
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    interpreters = [sys.executable, f"/usr/bin/python{version}", shutil.which(f"python{version}") or ""]
    site = sysconfig.get_paths()["purelib"]
    base_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
                "HOME": str(scratch), AS_SERVICE_USER_ENV: "1"}  # fmt: skip
    for checkout, site_dir in ((REPO, site), (scratch / "checkout", scratch / "site-packages")):
        if checkout != REPO and not checkout.exists():
            # The service user cannot read this checkout: copy what the tests need where it can.
            shutil.copytree(REPO, checkout, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__"))
            shutil.copytree(site, site_dir, ignore=shutil.ignore_patterns("__pycache__"))
            for path in (scratch, checkout, site_dir):
                path.chmod(0o755)
        env = dict(base_env, PYTHONPATH=f"{checkout}:{site_dir}")
        for python in dict.fromkeys(p for p in interpreters if p):
            if _runs_as_service_user(python, env):
                return python, env, checkout
    return f"no Python {version} interpreter with this checkout's packages is usable by {SERVICE_USER}"


def service_user_scratch(prefix: str) -> tuple[pwd.struct_passwd, Path]:
    """The service user and a fresh scratch directory it can enter, or pytest.skip saying why not
    (the caller removes the directory)."""
    import pytest

    problem = service_user_problem()
    if problem is not None:
        pytest.skip(problem)
    if os.environ.get(AS_SERVICE_USER_ENV):
        pytest.skip("already acting as the service user")
    user = ensure_service_user()
    scratch = Path(tempfile.mkdtemp(prefix=prefix))
    scratch.chmod(0o755)
    return user, scratch


def pytest_as_service_user(files: list[str], prefix: str, *, own_home: bool = False) -> tuple[int, str]:
    """Run test files of this checkout as the service user: (exit status, the output's tail).

    Skips (pytest.skip) where the user cannot be set up or already acts as it. `own_home`: a home
    of its own outside /tmp (the production-layout tests put a state directory in ~/.cache).
    """
    import pytest

    user, scratch = service_user_scratch(prefix)
    home: Path | None = None
    try:
        how = service_user_python(scratch)
        if isinstance(how, str):
            pytest.skip(how)
        python, env, checkout = how
        # Its own temporary directories (pytest remakes --basetemp, so one level down).
        (scratch / "t").mkdir()
        os.chown(scratch / "t", user.pw_uid, user.pw_gid)
        if own_home:
            home = Path(tempfile.mkdtemp(prefix="edgeclaw-svc-home-", dir="/var/tmp"))
            os.chown(home, user.pw_uid, user.pw_gid)
            env = dict(env, HOME=str(home))
        argv = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={scratch}/t/run", *files]
        done = subprocess.run(
            as_service_user(argv), env=env, cwd=checkout, capture_output=True, text=True, timeout=900
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)
    return done.returncode, done.stdout[-6000:] + done.stderr[-2000:]
