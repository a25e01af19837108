"""The messaging tools: `message` (text to a channel target or a notification service) and
`delegate` (a task handed to a named agent, its answer waited for)."""
