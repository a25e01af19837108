"""`git`: version control of the workspace, run in the sandbox the shell tools use.

Each action takes named arguments (see `GitTool.parameters`); the tool builds git's command line
itself (`git_rules` checks every argument and the repository's own config), runs the system git
through `edgeclaw.sandbox` (firejail or bubblewrap: only the workspace writable, the daemon's
state and secrets out of sight), with the repository as working directory, no system or global
config, a throwaway HOME, no hooks and no config-driven commands. Local actions run without the
network; clone, fetch, pull and push get it, to the one vetted address of each remote
(`git_remote`).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import field
from pathlib import Path
from typing import Any, Final

from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.records import dataclass
from edgeclaw.sandbox import ChildProcess
from edgeclaw.sandbox.manager import SandboxUnavailable
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult
from edgeclaw.tools.runtime.shell import DRAIN_LIMIT_BYTES, ShellRunner, format_run
from edgeclaw.tools.vcs import git_rules as rules
from edgeclaw.tools.vcs.git_remote import (
    RemoteTarget,
    allowed_protocols,
    credential_env,
    header_token,
    looks_like_url,
    network_overrides,
    vet_remote,
)
from edgeclaw.tools.web.settings import WebSettings

ACTIONS: Final = (
    "init",
    "status",
    "log",
    "diff",
    "add",
    "commit",
    "checkout",
    "restore",
    "clone",
    "fetch",
    "pull",
    "push",
)
NETWORK_ACTIONS: Final = frozenset({"clone", "fetch", "pull", "push"})
DEFAULT_LOG_COUNT: Final = 20
MAX_LOG_COUNT: Final = 500
DEFAULT_USER: Final = "x-access-token"
# Who commits when the repository names nobody (user.name / user.email).
DEFAULT_IDENTITY: Final = ("edgeclaw", "edgeclaw@localhost")


@dataclass
class GitPlan:
    """One git run, checked: the arguments after `git`, where, with what network and credentials."""

    argv: list[str]
    cwd: Path
    targets: list[RemoteTarget] = field(default_factory=list)
    overrides: list[tuple[str, str]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    hide: list[str] = field(default_factory=list)  # values to scrub from the output


class GitTool(Tool):
    name = "git"
    group = "vcs"
    description = (
        "Version control of the workspace: init, status, log, diff, add, commit, checkout, restore; "
        "clone/fetch/pull/push over https to hosts the web rules allow. Named arguments only; a "
        "credential is a secret's name, never the token."
    )
    observing_actions = frozenset({"status", "log", "diff"})
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": list(ACTIONS)},
            "repo": {"type": "string", "description": "repository directory (default: workspace root)"},
            "paths": {
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "maxItems": rules.MAX_PATHS,
                "description": "workspace paths in the repository",
            },
            "all": {"type": "boolean", "description": "add/commit every change"},
            "message": {"type": "string"},
            "author_name": {"type": "string"},
            "author_email": {"type": "string"},
            "ref": {"type": "string", "description": "revision (main, HEAD~2, a..b); checkout's branch"},
            "create": {"type": "boolean", "description": "checkout: new branch `ref`"},
            "staged": {"type": "boolean"},
            "source": {"type": "string", "description": "restore: from this revision"},
            "max_count": {"type": "integer", "minimum": 1, "maximum": MAX_LOG_COUNT},
            "url": {"type": "string", "description": "clone: https:// URL"},
            "path": {"type": "string", "description": "clone: new directory"},
            "depth": {"type": "integer", "minimum": 1},
            "remote": {"type": "string", "description": "name (default origin) or https:// URL"},
            "branch": {"type": "string"},
            "set_upstream": {"type": "boolean"},
            "credential": {"type": "string", "description": "secret name ([tools.web.secrets])"},
            "username": {"type": "string", "description": f"with credential (default {DEFAULT_USER})"},
        },
        "required": ["action"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        runner: ShellRunner,
        web: WebSettings,
        *,
        allow_http_hosts: Sequence[str] = (),
        max_processes: int = 64,
        git: str | None = None,
    ) -> None:
        self.runner = runner
        self.web = web
        self.allow_http_hosts = tuple(allow_http_hosts)
        self.max_processes = max_processes
        self.git = git if git is not None else shutil.which("git")
        self.timeout_s = runner.sandbox_timeout_s + 30

    # -- checks ---------------------------------------------------------------------------------
    def _git(self) -> str:
        if not self.git:
            raise ToolRefused("refused: git is not installed (no `git` on PATH)")
        return self.git

    @property
    def _root(self) -> Path:
        return Path(self.runner.workspace.root).resolve()

    def _dir(self, value: object, what: str) -> Path:
        if value is None or value == "":
            return self._root
        if not isinstance(value, str):
            raise ToolRefused(f"refused: {what} must be a string")
        return self.runner.workspace.resolve(value)

    def _repo(self, args: Args) -> Path:
        repo = self._dir(args.get("repo"), "repo")
        problem = rules.git_dir_problem(repo, self._root)
        if problem is not None:
            if not (repo / ".git").exists():
                raise ToolError(
                    f"{args.get('repo') or 'the workspace'} is not a git repository (init or clone)"
                )
            raise ToolRefused(f"refused: {problem}")
        return repo

    def _paths(self, args: Args, repo: Path) -> list[str]:
        given = list(args.get("paths") or [])
        resolved = [self.runner.workspace.resolve(p) for p in given]
        return rules.repo_paths(given, resolved, repo)

    def _env(self, home: Path) -> dict[str, str]:
        return rules.base_env(self.runner.env(), home, self._root.parent)

    async def _targets(self, urls: Sequence[str], ctx: ToolContext) -> list[RemoteTarget]:
        policy = self.web.request_policy_for(ctx)
        return [await vet_remote(u, policy, self.allow_http_hosts) for u in dict.fromkeys(urls)]

    async def _remote(self, args: Args, config: rules.RepoConfig, ctx: ToolContext) -> tuple[str, list[str]]:
        """The remote argument as git gets it, and every URL it stands for."""
        remote = args.get("remote") or "origin"
        if not isinstance(remote, str):
            raise ToolRefused("refused: remote must be a string")
        if looks_like_url(remote):
            return remote, [remote]
        name = rules.remote_name(remote)
        urls = config.remote_urls(name)
        if not config.get(f"remote.{name}.url"):
            raise ToolError(f"the repository has no remote named {name!r}; pass an https:// URL as remote")
        return name, urls

    def _credential(self, args: Args, ctx: ToolContext, plan: GitPlan) -> None:
        name = args.get("credential")
        if name is None:
            return
        if plan.argv[0] not in NETWORK_ACTIONS:
            raise ToolRefused("refused: credential is only for clone, fetch, pull and push")
        if not isinstance(name, str) or not name:
            raise ToolRefused("refused: credential must be the name of a secret")
        secret = self.web.secret(name, ctx)
        if secret is None:
            known = ", ".join(self.web.secret_names(ctx)) or "none configured"
            raise ToolRefused(f"refused: no secret {name!r} for this agent in [tools.web.secrets] ({known})")
        user = rules.identity_part(args.get("username") or DEFAULT_USER, "username")
        if ":" in user:
            raise ToolRefused("refused: username may not contain ':'")
        plan.env.update(credential_env(plan.targets, user, secret))
        plan.hide += [secret, header_token(user, secret)]

    # -- the actions ----------------------------------------------------------------------------
    async def _plan(self, args: Args, ctx: ToolContext, home: Path) -> GitPlan:
        action = args["action"]
        env = self._env(home)
        if action == "clone":
            plan = await self._clone(args, ctx)
        elif action == "init":
            target = self._dir(args.get("repo"), "repo")
            if (target / ".git").exists() or (target / ".git").is_symlink():
                # Initialising again reads the repository's config: the same checks as any other action.
                await rules.read_repo_config(self._git(), self._repo(args), env)
            argv = ["init", "--template="]
            if args.get("branch"):
                argv.append(f"--initial-branch={rules.branch_name(args['branch'])}")
            plan = GitPlan([*argv, "--", str(target)], cwd=self._root)
        else:
            repo = self._repo(args)
            config = await rules.read_repo_config(self._git(), repo, env)
            plan = await self._in_repo(action, args, ctx, repo, config)
            plan.env.update({"GIT_DIR": str(repo / ".git"), "GIT_WORK_TREE": str(repo)})
        plan.overrides += network_overrides(plan.targets) if plan.targets else []
        plan.env["GIT_ALLOW_PROTOCOL"] = allowed_protocols(plan.targets)
        self._credential(args, ctx, plan)
        plan.env = {**env, **plan.env}
        return plan

    async def _clone(self, args: Args, ctx: ToolContext) -> GitPlan:
        url = args.get("url")
        if not isinstance(url, str):
            raise ToolRefused("refused: clone needs url (an https:// URL)")
        targets = await self._targets([url], ctx)
        raw_path = args.get("path")
        if not raw_path:
            name = url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
            raw_path = name if name and name not in (".", "..") else "repo"
        target = self._dir(raw_path, "path")
        if target == self._root or (target.exists() and (not target.is_dir() or any(target.iterdir()))):
            raise ToolRefused(f"refused: clone's path {raw_path!r} exists and is not an empty directory")
        argv = ["clone", "--template=", "--no-recurse-submodules"]
        if args.get("branch"):
            argv.append(f"--branch={rules.branch_name(args['branch'])}")
        if args.get("depth"):
            argv.append(f"--depth={int(args['depth'])}")
        return GitPlan([*argv, "--", url, str(target)], cwd=self._root, targets=targets)

    async def _in_repo(
        self, action: str, args: Args, ctx: ToolContext, repo: Path, config: rules.RepoConfig
    ) -> GitPlan:
        paths = self._paths(args, repo)
        argv: list[str]
        targets: list[RemoteTarget] = []
        overrides: list[tuple[str, str]] = []
        if action == "status":
            argv = ["status", "--short", "--branch"]
        elif action == "log":
            count = int(args.get("max_count") or DEFAULT_LOG_COUNT)
            argv = ["log", f"--max-count={count}", "--date=iso", "--format=%h %ad %an <%ae>%n    %s"]
            argv += [rules.revision(args["ref"])] if args.get("ref") else []
            argv += ["--", *paths]
        elif action == "diff":
            argv = ["diff", "--no-ext-diff", "--no-textconv", "--stat", "--patch"]
            argv += ["--cached"] if args.get("staged") else []
            argv += [rules.revision(args["ref"])] if args.get("ref") else []
            argv += ["--", *paths]
        elif action == "add":
            if not paths and not args.get("all"):
                raise ToolRefused("refused: add needs paths (or all: true)")
            argv = ["add", "--all", "--", *(paths or ["."])] if args.get("all") else ["add", "--", *paths]
        elif action == "commit":
            argv = ["commit", "--no-verify", f"--message={rules.message(args.get('message'))}"]
            argv += ["--all"] if args.get("all") else []
            if args.get("author_name") or args.get("author_email"):
                name = rules.identity_part(args.get("author_name") or DEFAULT_IDENTITY[0], "author_name")
                mail = rules.identity_part(args.get("author_email") or DEFAULT_IDENTITY[1], "author_email")
                argv.append(f"--author={name} <{mail}>")
        elif action == "checkout":
            if paths:
                source = rules.revision(args["ref"]) if args.get("ref") else "HEAD"
                argv = ["checkout", "--no-recurse-submodules", source, "--", *paths]
            elif args.get("create"):
                argv = [
                    "checkout",
                    "--no-recurse-submodules",
                    "-b",
                    rules.branch_name(args.get("ref"), "ref"),
                ]
            else:
                argv = ["checkout", "--no-recurse-submodules", rules.revision(args.get("ref")), "--"]
        elif action == "restore":
            if not paths:
                raise ToolRefused("refused: restore needs paths")
            argv = ["restore", "--no-recurse-submodules"]
            argv += ["--staged"] if args.get("staged") else []
            argv += [f"--source={rules.revision(args['source'], 'source')}"] if args.get("source") else []
            argv += ["--", *paths]
        else:
            branch = [rules.branch_name(args["branch"])] if args.get("branch") else []
            remote, urls = await self._remote(args, config, ctx)
            targets = await self._targets(urls, ctx)
            if action == "fetch":
                argv = ["fetch", "--no-recurse-submodules", "--no-write-fetch-head", remote]
            elif action == "pull":
                argv = ["pull", "--no-rebase", "--no-edit", "--no-recurse-submodules", remote, *branch]
            else:
                argv = ["push", "--recurse-submodules=no", "--no-verify"]
                argv += ["--set-upstream"] if args.get("set_upstream") else []
                argv += [remote, *branch]
        if action in ("commit", "pull"):  # a merge commit needs a committer as much as a commit
            if not config.get("user.name"):
                overrides.append(("user.name", DEFAULT_IDENTITY[0]))
            if not config.get("user.email"):
                overrides.append(("user.email", DEFAULT_IDENTITY[1]))
        if paths and action in ("status", "commit", "fetch", "pull", "push"):
            raise ToolRefused(f"refused: {action} takes no paths")
        return GitPlan(argv, cwd=repo, targets=targets, overrides=overrides)

    # -- running --------------------------------------------------------------------------------
    def _command(self, plan: GitPlan) -> list[str]:
        argv = [self._git()]
        for key, value in [*rules.OVERRIDES, *plan.overrides]:
            argv += ["-c", f"{key}={value}"]
        return [*argv, *plan.argv]

    async def check(self, args: Args, ctx: ToolContext) -> None:
        self._git()
        with tempfile.TemporaryDirectory(prefix="edgeclaw-git-home-") as home:
            await self._plan(args, ctx, Path(home))
        await self.runner.backend()

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        runner = self.runner
        with tempfile.TemporaryDirectory(prefix="edgeclaw-git-home-") as home:
            plan = await self._plan(args, ctx, Path(home))
            timeout_s = await runner.timeout_for(None)
            try:
                launch = await runner.sandbox.launch(
                    self._command(plan),
                    workspace=runner.workspace.root,
                    cwd=plan.cwd,
                    env=plan.env,
                    network=bool(plan.targets),
                    timeout_s=timeout_s,
                    hidden=runner.hidden_paths(),
                )
            except SandboxUnavailable as e:
                raise ToolRefused(f"sandbox unavailable: {e}") from None
            child = await ChildProcess.start(launch)
            result = await child.run_to_end(timeout_s, runner.max_output_bytes, DRAIN_LIMIT_BYTES)
        for value in plan.hide:
            result.output = result.output.replace(value, "[REDACTED]")
        outcome = format_run(result, launch.backend, timeout_s, self.max_processes)
        outcome.data = {"action": args["action"], "exit_code": result.exit_code}
        return outcome
