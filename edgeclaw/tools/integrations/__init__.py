"""Tools that act through another platform's API on the accounts connected there (composio)."""
