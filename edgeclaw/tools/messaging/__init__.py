"""The messaging tools: `message` (text to a channel target or a notification service)."""
