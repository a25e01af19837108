"""The shell tools' imports point one way: exec, process and custom use `tools/runtime/shell.py`; it
uses none of them (not even behind a function or TYPE_CHECKING); `tools/runtime/shell_setup.py` is the
one module that knows them all."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parent.parent / "edgeclaw" / "tools" / "runtime"
TOOL_MODULES = {
    "edgeclaw.tools.runtime.exec",
    "edgeclaw.tools.runtime.process",
    "edgeclaw.tools.runtime.custom",
    "edgeclaw.tools.runtime.shell_setup",
}


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports anywhere: top level, inside functions, under TYPE_CHECKING."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_shell_imports_none_of_the_tools_that_use_it() -> None:
    assert imported_modules(TOOLS / "shell.py") & TOOL_MODULES == set()
    for user in ("exec.py", "process.py", "custom.py"):
        assert "edgeclaw.tools.runtime.shell_setup" not in imported_modules(TOOLS / user)
    assert {
        "edgeclaw.tools.runtime.exec",
        "edgeclaw.tools.runtime.process",
        "edgeclaw.tools.runtime.custom",
    } <= imported_modules(TOOLS / "shell_setup.py")


def test_loading_shell_loads_no_tool_module() -> None:
    probe = (
        "import sys, edgeclaw.tools.runtime.shell; "
        f"print(sorted(m for m in sys.modules if m in {sorted(TOOL_MODULES)!r}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
