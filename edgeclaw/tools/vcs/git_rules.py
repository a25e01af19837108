"""What the git tool lets through: argument checks, the repository's own config, and the fixed settings.

The model never writes a git command line. Each action takes named arguments, and each is checked
here before anything runs: a path must lie in the workspace (and in the repository), a ref or a
branch or a remote name may not begin with '-' (nor hold anything but the characters such names
use), a message is one argument of its own. Git's own options are chosen by the tool, never passed
through, so `-c`, `--upload-pack`, `--exec`, `--receive-pack` and `--config` cannot be asked for.

A repository's `.git/config` is data someone else may have written (a hostile archive unpacked, a
file tool's write): git runs commands it names (core.fsmonitor, core.sshCommand, core.pager,
filter and diff drivers, credential helpers...) and fetches where it says (url.*.insteadOf,
http.proxy). So a repository is used only when every key of its config is one of `ALLOWED_KEYS`,
read with git itself (`git config --file --list`, no includes), and `OVERRIDES` are given on the
command line of every run, where they win over anything the repository says.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.records import dataclass

MAX_REF_CHARS: Final = 200
MAX_MESSAGE_CHARS: Final = 10_000
MAX_PATHS: Final = 200
CONFIG_READ_TIMEOUT_S: Final = 10.0

# Given as `-c KEY=VALUE` before the subcommand of every run: the command line wins over the
# repository's config, and these keep git from running anything but itself.
OVERRIDES: Final[tuple[tuple[str, str], ...]] = (
    ("core.hooksPath", "/dev/null"),  # no hooks, whatever .git/hooks holds
    ("core.fsmonitor", "false"),
    ("core.sshCommand", "/bin/false"),
    ("core.askPass", "/bin/false"),
    ("core.pager", "cat"),
    ("core.editor", "true"),
    ("core.symlinks", "false"),  # a checked-out symlink is a plain file holding the target's name
    ("core.protectNTFS", "true"),
    ("core.protectHFS", "true"),
    ("credential.helper", ""),  # an empty value clears the list
    ("protocol.allow", "never"),
    ("protocol.file.allow", "never"),
    ("protocol.ext.allow", "never"),
    ("protocol.ssh.allow", "never"),
    ("protocol.git.allow", "never"),
    ("protocol.https.allow", "always"),
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("diff.external", ""),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("push.gpgSign", "false"),
    ("log.showSignature", "false"),
    ("http.followRedirects", "false"),  # a redirect could lead anywhere; the guard saw one host
    ("http.sslVerify", "true"),
    ("http.saveCookies", "false"),
    ("transfer.fsckObjects", "true"),
    ("gc.auto", "0"),  # no background gc left running after the call
    ("maintenance.auto", "false"),
    ("color.ui", "false"),
    ("init.defaultBranch", "main"),
)

# The keys a repository's own config may hold. Each name is `section.key` or, for a section with a
# subsection (`remote "origin"`), `section.*.key`. Anything else (include, url, http, filter, diff,
# merge, credential, alias, core.* beyond these...) refuses the repository.
ALLOWED_KEYS: Final = frozenset(
    {
        "core.repositoryformatversion",
        "core.filemode",
        "core.bare",
        "core.logallrefupdates",
        "core.ignorecase",
        "core.precomposeunicode",
        "core.symlinks",
        "core.autocrlf",
        "core.eol",
        "core.safecrlf",
        "core.quotepath",
        "remote.*.url",
        "remote.*.pushurl",
        "remote.*.fetch",
        "remote.*.push",
        "remote.*.tagopt",
        "remote.*.prune",
        "remote.*.prunetags",
        "branch.*.remote",
        "branch.*.merge",
        "branch.*.rebase",
        "user.name",
        "user.email",
        "init.defaultbranch",
        "pull.rebase",
        "pull.ff",
        "push.default",
        "push.autosetupremote",
        "extensions.objectformat",
        "gc.auto",
    }
)

_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
_REVISION: Final = re.compile(r"[A-Za-z0-9._/~^@{}+-]+")
_REMOTE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _text(value: object, what: str, limit: int = MAX_REF_CHARS) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ToolRefused(f"refused: {what} must be a non-empty string")
    if len(value) > limit:
        raise ToolRefused(f"refused: {what} is longer than {limit} characters")
    if value.startswith("-"):
        raise ToolRefused(f"refused: {what} {value!r} begins with '-' (git would read it as an option)")
    return value


def revision(value: object, what: str = "ref") -> str:
    """A revision for log, diff, checkout, restore: a branch, tag, commit, `HEAD~2`, `main..topic`."""
    text = _text(value, what)
    if not _REVISION.fullmatch(text):
        raise ToolRefused(f"refused: {what} {text!r} holds characters a ref does not use")
    return text


def branch_name(value: object, what: str = "branch") -> str:
    """A branch name to create or push: the characters of ref names, no '..', no '.lock' end."""
    text = _text(value, what)
    if not _NAME.fullmatch(text) or ".." in text or "//" in text or text.endswith((".lock", "/", ".")):
        raise ToolRefused(f"refused: {what} {text!r} is not a valid branch name")
    return text


def remote_name(value: object) -> str:
    text = _text(value, "remote")
    if not _REMOTE.fullmatch(text):
        raise ToolRefused(f"refused: remote {text!r} is not a remote name (letters, digits, '.', '_', '-')")
    return text


def message(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ToolRefused("refused: message must be a non-empty string")
    if len(value) > MAX_MESSAGE_CHARS:
        raise ToolRefused(f"refused: message is longer than {MAX_MESSAGE_CHARS} characters")
    if "\0" in value:
        raise ToolRefused("refused: message contains a NUL character")
    return value


def identity_part(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        raise ToolRefused(f"refused: {what} must be a non-empty string of at most 200 characters")
    if any(c in value for c in "<>\n\r\0"):
        raise ToolRefused(f"refused: {what} may not contain '<', '>', a line break or NUL")
    return value


def within(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def repo_paths(paths: Sequence[str], resolved: Sequence[Path], repo: Path) -> list[str]:
    """Paths relative to the repository for git (after `--`), each already resolved in the workspace.

    `paths` are as the caller wrote them, `resolved` their real paths (`Workspace.resolve`)."""
    if len(paths) > MAX_PATHS:
        raise ToolRefused(f"refused: at most {MAX_PATHS} paths per call")
    out: list[str] = []
    for shown, real in zip(paths, resolved, strict=True):
        if not within(real, repo):
            raise ToolRefused(f"refused: path {shown!r} is outside the repository {repo.name or repo}")
        rel = real.relative_to(repo)
        if ".git" in rel.parts:
            raise ToolRefused(f"refused: path {shown!r} is inside .git, which only git itself writes")
        out.append(str(rel) if rel.parts else ".")
    return out


@dataclass(frozen=True)
class RepoConfig:
    """A repository's own config, vetted: its keys (lower-cased section and key) and values."""

    entries: tuple[tuple[str, str], ...]

    def get(self, key: str) -> list[str]:
        key = _canonical(key)
        return [v for k, v in self.entries if _canonical(k) == key]

    def remote_urls(self, remote: str) -> list[str]:
        return [*self.get(f"remote.{remote}.url"), *self.get(f"remote.{remote}.pushurl")]


def _canonical(key: str) -> str:
    """`Remote.Origin.URL` -> `remote.Origin.url`: section and key fold case, a subsection keeps it."""
    first, _, rest = key.partition(".")
    middle, _, last = rest.rpartition(".")
    return ".".join(p for p in (first.lower(), middle, last.lower()) if p)


def _pattern(key: str) -> str:
    first, _, rest = key.partition(".")
    middle, _, last = rest.rpartition(".")
    return f"{first.lower()}.*.{last.lower()}" if middle else f"{first.lower()}.{last.lower()}"


def git_dir_problem(repo: Path, workspace: Path) -> str | None:
    """Why the repository at `repo` may not be used (its .git is not a plain directory in the
    workspace, or borrows from elsewhere), or None."""
    dot_git = repo / ".git"
    if dot_git.is_symlink() or not dot_git.is_dir():
        what = "a symlink" if dot_git.is_symlink() else "not a directory" if dot_git.exists() else "missing"
        return f"{dot_git.relative_to(workspace)} is {what}; only a plain .git directory is used"
    for name in ("config", "commondir", "objects/info/alternates", "config.worktree"):
        entry = dot_git / name
        if name == "config":
            if entry.is_symlink() or (entry.exists() and not entry.is_file()):
                return ".git/config is not a plain file"
            if entry.exists() and entry.stat().st_nlink > 1:
                # Another name of the same file may lie outside the workspace (the daemon's config).
                return ".git/config has more than one hard link"
        elif entry.exists() or entry.is_symlink():
            return f".git/{name} exists: the repository would read from outside itself"
    return None


async def read_repo_config(git: str, repo: Path, env: Mapping[str, str]) -> RepoConfig:
    """The repository's own config, refused (ToolRefused naming the keys) when a key is not allowed.

    Read by git (so exactly as git reads it), from the file alone: no includes, no other config."""
    config = repo / ".git" / "config"
    if not config.exists():
        return RepoConfig(())
    proc = await asyncio.create_subprocess_exec(
        git,
        "config",
        "--file",
        str(config),
        "--no-includes",
        "--null",
        "--list",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env),
        cwd=str(repo),
    )
    try:
        out, _err = await asyncio.wait_for(proc.communicate(), CONFIG_READ_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise ToolError("reading .git/config took too long") from None
    if proc.returncode != 0:
        raise ToolRefused("refused: .git/config does not parse as a git config file")
    entries: list[tuple[str, str]] = []
    for record in out.decode("utf-8", "replace").split("\0"):
        if not record:
            continue
        key, _, value = record.partition("\n")
        entries.append((key, value))
    bad = sorted({k for k, _ in entries if _pattern(k) not in ALLOWED_KEYS})
    if bad:
        shown = ", ".join(bad[:8]) + (" ..." if len(bad) > 8 else "")
        raise ToolRefused(
            f"refused: .git/config sets {shown}, which the git tool does not allow (such keys can run "
            "commands or send git elsewhere); remove them or use a fresh clone"
        )
    return RepoConfig(tuple(entries))


def base_env(env: Mapping[str, str], home: Path, ceiling: Path) -> dict[str, str]:
    """The environment of every git run: only the child's allowlisted variables, no git or proxy
    setting of the daemon's, no system or global config, no prompts, no pager, no editor."""
    out = {
        k: v
        for k, v in env.items()
        if not k.startswith("GIT_") and not k.lower().endswith("_proxy") and k not in ("SSH_ASKPASS", "EMAIL")
    }
    out.update(
        {
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ASKPASS": "/bin/false",
            "GIT_PAGER": "cat",
            "PAGER": "cat",
            "GIT_EDITOR": "true",
            "GIT_MERGE_AUTOEDIT": "no",
            "GIT_LITERAL_PATHSPECS": "1",
            "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_PROTOCOL_FROM_USER": "0",
            "GIT_CEILING_DIRECTORIES": str(ceiling),
            "GIT_OPTIONAL_LOCKS": "0",
        }
    )
    return out
