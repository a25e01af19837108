"""`edgeclaw chat`: the agent on this terminal."""

from __future__ import annotations

import argparse

from edgeclaw.cli.common import EXIT_OK, EXIT_TOOL_ERROR, config_of, warn_missing_secrets


def cmd_chat(args: argparse.Namespace) -> int:
    import asyncio

    config = config_of(args)

    async def chat() -> int:
        from edgeclaw.channels.terminal import TerminalChannel, register_approver, register_outlet
        from edgeclaw.daemon.agent import build_agent
        from edgeclaw.daemon.runtime import build_runtime

        # A model key missing from this shell is a warning (the provider will answer 401), not a
        # refusal: slash commands and other providers still work.
        runtime = build_runtime(config, board=args.board, require_secrets=False)
        warn_missing_secrets(config)
        try:
            terminal = TerminalChannel(build_agent(runtime))
            register_approver(terminal, runtime.approvals)
            register_outlet(terminal, runtime.outlets)  # subagent results and messages sent here
            await runtime.ready()  # subagents an earlier chat left unfinished are reported now
            if args.message is not None:
                # Subagents the turn started are waited for: their results, and the agent's answer
                # to them, are printed before the chat ends.
                settle = runtime.subagents.settled if runtime.subagents is not None else None
                reply = await terminal.one_turn(args.message, settle)
                return EXIT_OK if reply.ok else EXIT_TOOL_ERROR
            return await terminal.interactive_loop(runtime.state_dir / "chat_history")
        finally:
            await runtime.aclose()

    return asyncio.run(chat())
