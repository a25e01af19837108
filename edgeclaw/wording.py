"""Small wording helpers every layer may use, so counts read as sentences on every channel."""

from __future__ import annotations


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """`plural(1, "try")` → "1 try", `plural(3, "try", "tries")` → "3 tries"; never "try(s)"."""
    return f"{count} {noun if count == 1 else (plural_form or noun + 's')}"
