"""Figures the docs quote that the code can compute are computed: the tools table in docs/models.md is
what `edgeclaw tools sizes --board sim` prints for the default config, so a tool added, removed or
re-described changes the test's expectation and the docs must follow."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

from edgeclaw.cli.tool_sizes import profile_sizes, sizes_table
from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.runtime import build_runtime

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"<!-- tool-sizes: begin[^>]*-->\n(.*?)\n<!-- tool-sizes: end -->", re.S)


def sim_sizes(tmp_path: Path):
    config = config_from_dict({"board": "sim", "state_dir": str(tmp_path / "state")}, "t.toml")
    runtime = build_runtime(config, environ={}, require_secrets=False)
    try:
        return profile_sizes(runtime.registry)
    finally:
        asyncio.run(runtime.aclose())


def test_the_tools_table_in_the_docs_is_what_the_code_computes(tmp_path):
    [quoted] = BLOCK.findall((DOCS / "models.md").read_text())
    expected = sizes_table(sim_sizes(tmp_path))
    assert quoted == expected, f"docs/models.md's tools table is stale; put this there:\n{expected}"


def test_the_figures_are_the_profiles_as_the_policy_draws_them(tmp_path):
    sizes = {s.profile: s for s in sim_sizes(tmp_path)}
    full, device, remote = sizes["full"], sizes["device"], sizes["remote"]
    # Every profile is within everything; the ones a small model gets are a good deal smaller.
    assert all(s.tools <= full.tools and s.definition_bytes <= full.definition_bytes for s in sizes.values())
    assert sizes["minimal"].tools == 1 and sizes["homeassistant"].tools == 1
    assert remote.tools < device.tools < full.tools and device.tokens < full.tokens / 2
    # Compact definitions cost less than whole ones wherever a description has a second sentence.
    assert full.compact_tokens < full.tokens


def test_the_command_prints_the_same_table(tmp_path):
    config = tmp_path / "edgeclaw.toml"
    config.write_text(f'board = "sim"\nstate_dir = "{tmp_path / "state"}"\n')
    out = subprocess.run(
        [sys.executable, "-m", "edgeclaw", "tools", "sizes", "--config", str(config)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert out.strip() == sizes_table(sim_sizes(tmp_path))
