"""The sessions group: `sessions_list`, `sessions_history` (`listing`), `session_status` (`status`),
`sessions_send` (`send`), `sessions_spawn`/`spawn` and `subagents` (`subagents`), `agents_list`
(`agents`) and `delegate` (a task handed to a named agent, its answer waited for)."""
