"""The state database: one SQLite file (WAL) under the state directory."""

from edgeclaw.store.db import Database, Migration

__all__ = ["Database", "Migration"]
