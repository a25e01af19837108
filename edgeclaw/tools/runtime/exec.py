"""`exec`: run one shell command in the workspace, sandboxed, and return its output.

`check` (also what a dry run does): the command is normalised, the deny
groups, security and ask modes are applied, the working directory must be
inside the workspace, and the sandbox must work (or the call is refused:
never a silent fallback to the host). `execute` asks for approval when the
command needs it, then runs `/bin/sh -c COMMAND` through the sandbox with a
timeout that kills the whole process group, and returns the output (capped,
with the cut stated) followed by a status line with the exit status.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edgeclaw.tools.base import Args, PendingApproval, Tool, ToolContext, ToolResult
from edgeclaw.tools.runtime.shell import format_run

if TYPE_CHECKING:
    from edgeclaw.tools.runtime.shell import ShellTools


class ExecTool(Tool):
    name = "exec"
    group = "runtime"
    description = (
        "Run a shell command (/bin/sh -c) in the workspace, inside the sandbox: no network unless "
        "granted, only the workspace writable. Returns the output (stdout and stderr) and the exit status. "
        "Dangerous commands are refused; some need a person's approval."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1, "description": "the shell command line"},
            "timeout_s": {
                "type": "number",
                "exclusiveMinimum": 0,
                "description": "seconds before it is killed (default and maximum: 60 host, 300 sandboxed)",
            },
            "cwd": {
                "type": "string",
                "description": "working directory in the workspace (default: its root)",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    }

    def __init__(self, shell: ShellTools) -> None:
        self.shell = shell
        # The registry's own deadline is only a backstop: approval may take its full time, then
        # the command its full timeout; the runner kills the command at its own deadline.
        self.timeout_s = shell.runner.sandbox_timeout_s + shell.gate.approval_timeout_s + 30

    async def check(self, args: Args, ctx: ToolContext) -> PendingApproval | None:
        assessment = self.shell.gate.check(args["command"], ctx, tool=self.name)
        self.shell.runner.resolve_cwd(args.get("cwd"))
        await self.shell.runner.backend()
        return self.shell.gate.dry_run_note(assessment, ctx, tool=self.name)

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        shell = self.shell
        assessment = shell.gate.check(args["command"], ctx, tool=self.name)
        cwd = shell.runner.resolve_cwd(args.get("cwd"))
        timeout_s = await shell.runner.timeout_for(args.get("timeout_s"))
        await shell.gate.approve(assessment, ctx, tool=self.name)
        policy = shell.policies.for_agent(ctx.agent_id)
        result, backend = await shell.runner.run(
            assessment.command, cwd=cwd, network=policy.network, timeout_s=timeout_s
        )
        return format_run(result, backend, timeout_s, shell.max_processes)
