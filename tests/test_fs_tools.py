"""The fs tools, called directly (check, then execute) on a workspace under tmp_path."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path
from typing import Any

import pytest

from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.tools.base import Tool, ToolContext, ToolResult
from edgeclaw.tools.fs import file_io, globs
from edgeclaw.tools.fs import files as fs
from edgeclaw.tools.fs.files import (
    EditFileTool,
    FileAppendTool,
    GlobTool,
    ListFilesTool,
    ReadFileTool,
    SearchTool,
    WriteFileTool,
    fs_tools,
)
from edgeclaw.tools.fs.workspace import Workspace
from edgeclaw.tools.schema import ArgumentError, compile_schema

CTX = ToolContext()
LIMIT = 4096  # a small max_file_bytes keeps the size tests fast


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text("password=hunter2\n")
    return d


@pytest.fixture
def ws(tmp_path: Path, outside: Path) -> Workspace:
    root = tmp_path / "ws"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "main.py").write_text("import os\n\ndef main():\n    return 42\n")
    (root / "src" / "pkg" / "util.py").write_text("def helper():\n    return 'TODO'\n")
    (root / "src" / "pkg" / "notes.md").write_text("TODO: write docs\n")
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (root / "lines.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    (root / "blob.bin").write_bytes(b"\x7fELF\x00\x01\x02" * 10)
    return Workspace(root, max_file_bytes=LIMIT)


async def run(tool: Tool, **args: Any) -> str:
    """check() then execute(), as the registry does; returns the text for the model."""
    await tool.check(args, CTX)
    result = await tool.execute(args, CTX)
    assert isinstance(result, ToolResult)
    assert not result.is_error
    return result.for_llm


# -- shape -----------------------------------------------------------------------------------


def test_fs_tools_shape(ws: Workspace) -> None:
    tools = fs_tools(ws)
    names = [t.name for t in tools]
    assert names == ["read_file", "write_file", "edit_file", "file_append", "list_files", "search", "glob"]
    for tool in tools:
        assert tool.group == "fs"
        assert tool.description and len(tool.description) < 300
        schema = tool.parameters
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        assert set(schema["required"]) <= set(schema["properties"])
        for prop in schema["properties"].values():
            assert prop.get("description")
        assert tool.info().name == tool.name


def test_schemas_refuse_unknown_missing_and_mistyped_arguments(ws: Workspace) -> None:
    # The registry validates against these schemas before a tool runs, so they are the guard.
    read = compile_schema(ReadFileTool(ws).parameters)
    write = compile_schema(WriteFileTool(ws).parameters)
    with pytest.raises(ArgumentError, match="unknown argument"):
        read({"path": "lines.txt", "bogus": 1})
    with pytest.raises(ArgumentError, match="missing required argument 'content'"):
        write({"path": "x.txt"})
    with pytest.raises(ArgumentError, match="start_line"):
        read({"path": "lines.txt", "start_line": True})
    with pytest.raises(ArgumentError, match="start_line"):
        read({"path": "lines.txt", "start_line": 0})


# -- every tool refuses traversal in check() and execute() -----------------------------------------

TRAVERSALS = ["../outside/secret.txt", "/etc/passwd", "%2e%2e/outside/secret.txt", "..\\outside", "a\x00b"]


def _calls() -> list[tuple[type[Tool], dict[str, Any]]]:
    return [
        (ReadFileTool, {}),
        (WriteFileTool, {"content": "x"}),
        (EditFileTool, {"old_text": "a", "new_text": "b"}),
        (FileAppendTool, {"content": "x"}),
        (ListFilesTool, {}),
        (SearchTool, {"pattern": "x"}),
    ]


@pytest.mark.parametrize("user_path", TRAVERSALS)
@pytest.mark.parametrize(("cls", "extra"), _calls(), ids=lambda v: getattr(v, "name", ""))
async def test_tools_refuse_traversal(
    ws: Workspace, cls: type[Tool], extra: dict[str, Any], user_path: str
) -> None:
    tool = cls(ws)  # type: ignore[call-arg]
    args = {"path": user_path, **extra}
    with pytest.raises(ToolRefused):
        await tool.check(args, CTX)
    with pytest.raises(ToolRefused):  # execute resolves again, it does not trust check
        await tool.execute(args, CTX)


async def test_write_through_dangling_symlink_outside_refused(ws: Workspace, outside: Path) -> None:
    (ws.root / "trap").symlink_to(outside / "planted.txt")
    for tool, extra in ((WriteFileTool(ws), {}), (FileAppendTool(ws), {})):
        with pytest.raises(ToolRefused):
            await tool.execute({"path": "trap", "content": "pwned", **extra}, CTX)
    assert not (outside / "planted.txt").exists()


async def test_read_through_symlink_to_outside_refused(ws: Workspace, outside: Path) -> None:
    (ws.root / "src" / "leak").symlink_to(outside)
    with pytest.raises(ToolRefused):
        await ReadFileTool(ws).execute({"path": "src/leak/secret.txt"}, CTX)


# -- read_file ---------------------------------------------------------------------------------------


async def test_read_whole_file(ws: Workspace) -> None:
    out = await run(ReadFileTool(ws), path="lines.txt")
    header, *body = out.split("\n")
    assert header == "[lines.txt: lines 1-10 of 10]"
    assert body == [f"line {i}" for i in range(1, 11)]


async def test_read_line_range(ws: Workspace) -> None:
    out = await run(ReadFileTool(ws), path="lines.txt", start_line=3, end_line=5)
    assert out == "[lines.txt: lines 3-5 of 10; next: start_line=6]\nline 3\nline 4\nline 5"
    out = await run(ReadFileTool(ws), path="lines.txt", start_line=9, end_line=99)
    assert out == "[lines.txt: lines 9-10 of 10]\nline 9\nline 10"


async def test_read_caps_lines_and_says_how_to_continue(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fs, "READ_MAX_LINES", 4)
    out = await run(ReadFileTool(ws), path="lines.txt")
    assert out.startswith("[lines.txt: lines 1-4 of 10; next: start_line=5]\n")


async def test_read_range_errors(ws: Workspace) -> None:
    tool = ReadFileTool(ws)
    with pytest.raises(ToolError, match="past the end"):
        await tool.execute({"path": "lines.txt", "start_line": 11}, CTX)
    with pytest.raises(ToolError, match="before start_line"):
        await tool.check({"path": "lines.txt", "start_line": 5, "end_line": 4}, CTX)
    with pytest.raises(ToolError, match="no such file"):
        await tool.check({"path": "missing.txt"}, CTX)
    with pytest.raises(ToolError, match="directory"):
        await tool.check({"path": "src"}, CTX)


async def test_read_empty_and_no_final_newline(ws: Workspace) -> None:
    (ws.root / "empty.txt").write_text("")
    assert await run(ReadFileTool(ws), path="empty.txt") == "[empty.txt: empty file]"
    (ws.root / "nonl.txt").write_text("one\ntwo")
    assert await run(ReadFileTool(ws), path="nonl.txt") == "[nonl.txt: lines 1-2 of 2]\none\ntwo"


async def test_read_binary_file(ws: Workspace) -> None:
    with pytest.raises(ToolError, match=r"binary file \(70 bytes\)"):
        await ReadFileTool(ws).execute({"path": "blob.bin"}, CTX)


async def test_read_size_limit(ws: Workspace) -> None:
    (ws.root / "big.txt").write_text("x" * (LIMIT + 1))
    with pytest.raises(ToolRefused, match="over the"):
        await ReadFileTool(ws).check({"path": "big.txt"}, CTX)
    with pytest.raises(ToolRefused, match="over the"):
        await ReadFileTool(ws).execute({"path": "big.txt"}, CTX)


async def test_read_fifo_does_not_hang(ws: Workspace) -> None:
    os.mkfifo(ws.root / "pipe")
    with pytest.raises(ToolError, match="not a regular file"):
        await ReadFileTool(ws).execute({"path": "pipe"}, CTX)


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        (ReadFileTool, {"path": "pipe"}),
        (SearchTool, {"pattern": "x", "path": "pipe"}),
        (FileAppendTool, {"path": "pipe", "content": "x"}),
        (WriteFileTool, {"path": "pipe", "content": "x"}),
        (EditFileTool, {"path": "pipe", "old_text": "a", "new_text": "b"}),
    ],
)
async def test_special_files_are_refused_before_they_are_opened(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, tool: type[Tool], args: dict[str, Any]
) -> None:
    # Opening a device can act on it (a serial port's DTR resets the board behind it); a FIFO
    # stands in for one here, and no open() of it may happen at all.
    os.mkfifo(ws.root / "pipe")
    opened: list[str] = []
    real_open = os.open

    def watching_open(path: Any, *a: Any, **kw: Any) -> int:
        opened.append(os.fspath(path))
        return real_open(path, *a, **kw)

    monkeypatch.setattr(os, "open", watching_open)
    with pytest.raises(ToolError, match="not a regular file"):
        await tool(ws).execute(args, CTX)
    assert not [p for p in opened if p.endswith("pipe")]


async def test_read_big_file_goes_through_thread(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_io, "INLINE_IO_BYTES", 10)
    out = await run(ReadFileTool(ws), path="lines.txt", start_line=10)
    assert out.endswith("line 10")


# -- write_file -------------------------------------------------------------------------------------


async def test_write_then_read(ws: Workspace) -> None:
    out = await run(WriteFileTool(ws), path="new/deep/file.txt", content="hello\nworld\n")
    assert out.startswith("created new/deep/file.txt (12 bytes, 2 lines)")
    assert await run(ReadFileTool(ws), path="new/deep/file.txt") == (
        "[new/deep/file.txt: lines 1-2 of 2]\nhello\nworld"
    )
    out = await run(WriteFileTool(ws), path="new/deep/file.txt", content="bye\n")
    assert out.startswith("overwrote")
    assert (ws.root / "new/deep/file.txt").read_text() == "bye\n"


async def test_write_check_touches_nothing(ws: Workspace) -> None:
    await WriteFileTool(ws).check({"path": "fresh/dir/x.txt", "content": "x"}, CTX)
    assert not (ws.root / "fresh").exists()


async def test_write_keeps_permissions_and_leaves_no_temp(ws: Workspace) -> None:
    target = ws.root / "script.sh"
    target.write_text("#!/bin/sh\n")
    target.chmod(0o751)
    await run(WriteFileTool(ws), path="script.sh", content="#!/bin/sh\necho hi\n")
    assert target.stat().st_mode & 0o777 == 0o751
    assert [p.name for p in ws.root.iterdir() if p.name.endswith(".tmp")] == []


async def test_write_is_atomic_on_failure(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    target = ws.root / "pyproject.toml"
    before = target.read_text()

    def broken_replace(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(file_io.os, "replace", broken_replace)
    with pytest.raises(ToolError, match="previous content is unchanged"):
        await WriteFileTool(ws).execute({"path": "pyproject.toml", "content": "garbage"}, CTX)
    monkeypatch.undo()
    assert target.read_text() == before
    assert sorted(p.name for p in ws.root.iterdir()) == ["blob.bin", "lines.txt", "pyproject.toml", "src"]


async def test_write_size_limit(ws: Workspace) -> None:
    with pytest.raises(ToolRefused, match="over the"):
        await WriteFileTool(ws).check({"path": "big.txt", "content": "x" * (LIMIT + 1)}, CTX)
    assert not (ws.root / "big.txt").exists()


async def test_write_onto_directory_or_through_file(ws: Workspace) -> None:
    with pytest.raises(ToolError, match="directory"):
        await WriteFileTool(ws).check({"path": "src", "content": "x"}, CTX)
    with pytest.raises(ToolError, match="cannot create"):
        await WriteFileTool(ws).execute({"path": "lines.txt/inner.txt", "content": "x"}, CTX)


async def test_write_to_inside_symlink_updates_target(ws: Workspace) -> None:
    (ws.root / "alias.toml").symlink_to(ws.root / "pyproject.toml")
    await run(WriteFileTool(ws), path="alias.toml", content="[tool]\n")
    assert (ws.root / "pyproject.toml").read_text() == "[tool]\n"
    assert (ws.root / "alias.toml").is_symlink()


# -- edit_file ---------------------------------------------------------------------------------------


async def test_edit_unique(ws: Workspace) -> None:
    out = await run(EditFileTool(ws), path="src/main.py", old_text="return 42", new_text="return 43")
    assert out == "edited src/main.py: replaced 1 occurrence (first at line 4)"
    assert "return 43" in (ws.root / "src/main.py").read_text()


async def test_edit_absent(ws: Workspace) -> None:
    with pytest.raises(ToolError, match=r"not found in src/main\.py"):
        await EditFileTool(ws).execute({"path": "src/main.py", "old_text": "nope", "new_text": "x"}, CTX)


async def test_edit_ambiguous_then_replace_all(ws: Workspace) -> None:
    (ws.root / "dup.txt").write_text("a = 1\nb = 1\nc = 1\n")
    args = {"path": "dup.txt", "old_text": "= 1", "new_text": "= 2"}
    with pytest.raises(ToolError, match="occurs 3 times"):
        await EditFileTool(ws).execute(args, CTX)
    assert (ws.root / "dup.txt").read_text() == "a = 1\nb = 1\nc = 1\n"
    out = await run(EditFileTool(ws), **args, replace_all=True)
    assert "replaced 3 occurrences" in out
    assert (ws.root / "dup.txt").read_text() == "a = 2\nb = 2\nc = 2\n"


async def test_edit_refuses_non_utf8_and_empty_old_text(ws: Workspace) -> None:
    (ws.root / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    with pytest.raises(ToolError, match="not valid UTF-8"):
        await EditFileTool(ws).execute({"path": "latin1.txt", "old_text": "caf", "new_text": "x"}, CTX)
    with pytest.raises(ToolError, match="empty"):
        await EditFileTool(ws).check({"path": "lines.txt", "old_text": "", "new_text": "x"}, CTX)


async def test_edit_crlf_hint(ws: Workspace) -> None:
    (ws.root / "dos.txt").write_bytes(b"one\r\ntwo\r\n")
    with pytest.raises(ToolError, match="CRLF"):
        await EditFileTool(ws).execute({"path": "dos.txt", "old_text": "one\ntwo", "new_text": "x"}, CTX)


async def test_edit_result_over_limit(ws: Workspace) -> None:
    with pytest.raises(ToolRefused, match="over the"):
        await EditFileTool(ws).execute(
            {"path": "lines.txt", "old_text": "line 1\n", "new_text": "y" * LIMIT}, CTX
        )
    assert (ws.root / "lines.txt").read_text().startswith("line 1\n")


# -- file_append ---------------------------------------------------------------------------------------


async def test_append_creates_then_appends(ws: Workspace) -> None:
    out = await run(FileAppendTool(ws), path="logs/run.log", content="first\n")
    assert out == "appended 6 bytes to logs/run.log (now 6 bytes)"
    await run(FileAppendTool(ws), path="logs/run.log", content="second\n")
    assert (ws.root / "logs/run.log").read_text() == "first\nsecond\n"


async def test_append_size_limit_counts_existing(ws: Workspace) -> None:
    (ws.root / "grow.txt").write_text("x" * (LIMIT - 2))
    await run(FileAppendTool(ws), path="grow.txt", content="ab")
    with pytest.raises(ToolRefused, match="over the"):
        await FileAppendTool(ws).execute({"path": "grow.txt", "content": "c"}, CTX)
    assert (ws.root / "grow.txt").stat().st_size == LIMIT


async def test_append_that_fails_half_way_leaves_the_file_as_it_was(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws.root / "log.txt").write_text("kept\n")
    real_write = os.write

    def disk_fills_up(fd: int, data: bytes | memoryview) -> int:
        if len(data) > 4:
            return real_write(fd, data[:4])  # a short write, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(file_io.os, "write", disk_fills_up)
    with pytest.raises(ToolError, match="No space left"):
        await FileAppendTool(ws).execute({"path": "log.txt", "content": "half of this\n"}, CTX)
    monkeypatch.undo()
    assert (ws.root / "log.txt").read_text() == "kept\n"


async def test_racing_appends_cannot_pass_the_size_limit_together(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Big appends run in threads; make a second one start while the first is writing.
    (ws.root / "grow.txt").write_text("x" * (LIMIT - 10))
    path, shown = ws.resolve("grow.txt"), "grow.txt"
    real_write_all = file_io.write_all
    second: list[BaseException | int] = []

    def write_all_with_a_rival(fd: int, data: bytes) -> None:
        if not second:
            try:
                second.append(file_io.append_to(ws, path, b"y" * 8, shown))
            except (ToolError, ToolRefused) as exc:
                second.append(exc)
        real_write_all(fd, data)

    monkeypatch.setattr(file_io, "write_all", write_all_with_a_rival)
    file_io.append_to(ws, path, b"z" * 8, shown)
    assert isinstance(second[0], ToolError) and "another call" in str(second[0])
    assert (ws.root / "grow.txt").stat().st_size <= LIMIT


async def test_parent_directories_are_not_made_through_a_symlink_raced_in(
    ws: Workspace, outside: Path
) -> None:
    # check() resolved "new/sub/f.txt" (nothing there yet); then "new" became a symlink to the outside.
    tool = WriteFileTool(ws)
    args = {"path": "new/sub/f.txt", "content": "x"}
    await tool.check(args, CTX)
    path, shown, data = tool._prepare(args)
    (ws.root / "new").symlink_to(outside)
    with pytest.raises(ToolRefused):
        file_io.write_atomically(ws, path, data, shown)
    assert not (outside / "sub").exists()


async def test_hard_link_to_a_file_outside_is_neither_read_nor_appended_to(
    ws: Workspace, outside: Path
) -> None:
    os.link(outside / "secret.txt", ws.root / "linked.txt")
    for tool, args in (
        (ReadFileTool(ws), {"path": "linked.txt"}),
        (FileAppendTool(ws), {"path": "linked.txt", "content": "owned\n"}),
        (EditFileTool(ws), {"path": "linked.txt", "old_text": "hunter2", "new_text": "x"}),
    ):
        with pytest.raises(ToolRefused, match="hard links"):
            await tool.execute(args, CTX)
    assert (outside / "secret.txt").read_text() == "password=hunter2\n"
    assert await run(SearchTool(ws), pattern="hunter2") == "no matches for 'hunter2' in ."


# -- list_files --------------------------------------------------------------------------------------------


async def test_list_top_level(ws: Workspace) -> None:
    out = await run(ListFilesTool(ws))
    assert out.split("\n") == ["[.: 4 entries]", "blob.bin", "lines.txt", "pyproject.toml", "src/"]


async def test_list_recursive(ws: Workspace) -> None:
    (ws.root / ".git" / "objects").mkdir(parents=True)
    out = await run(ListFilesTool(ws), path="src", recursive=True)
    assert out.split("\n") == [
        "[src: 4 entries, recursive]",
        "src/main.py",
        "src/pkg/",
        "src/pkg/notes.md",
        "src/pkg/util.py",
    ]
    out = await run(ListFilesTool(ws), recursive=True)
    assert ".git/ (not descended)" in out
    assert ".git/objects" not in out


async def test_list_recursive_truncation_note(ws: Workspace) -> None:
    out = await run(ListFilesTool(ws), recursive=True, max_entries=3)
    lines = out.split("\n")
    assert lines[0] == "[.: 3+ entries, recursive]"
    assert len(lines) == 5
    assert "truncated at 3 entries" in lines[-1]


async def test_list_symlinks_not_followed(ws: Workspace, outside: Path) -> None:
    (ws.root / "src" / "out").symlink_to(outside)
    (ws.root / "src" / "gone").symlink_to(ws.root / "missing")
    (ws.root / "src" / "pkg_alias").symlink_to("pkg")
    out = await run(ListFilesTool(ws), path="src", recursive=True)
    assert f"src/out -> {outside} (outside the workspace)" in out
    assert "src/gone -> " in out and "(dangling)" in out
    assert "src/pkg_alias -> pkg" in out
    assert "secret" not in out


async def test_list_errors(ws: Workspace) -> None:
    with pytest.raises(ToolError, match="use read_file"):
        await ListFilesTool(ws).check({"path": "lines.txt"}, CTX)
    (ws.root / "void").mkdir()
    assert await run(ListFilesTool(ws), path="void") == "[void: empty directory]"


# -- search --------------------------------------------------------------------------------------------------


async def test_search_regex(ws: Workspace) -> None:
    out = await run(SearchTool(ws), pattern=r"TODO")
    assert out.split("\n") == [
        "src/pkg/notes.md:1: TODO: write docs",
        "src/pkg/util.py:2:     return 'TODO'",
        "(2 matches in 2 files)",
    ]


async def test_search_glob_filter_and_path(ws: Workspace) -> None:
    out = await run(SearchTool(ws), pattern=r"^def \w+", glob="*.py")
    assert out.split("\n")[:2] == ["src/main.py:3: def main():", "src/pkg/util.py:1: def helper():"]
    out = await run(SearchTool(ws), pattern="TODO", glob="*.md", path="src")
    assert out.split("\n")[0] == "src/pkg/notes.md:1: TODO: write docs"
    out = await run(SearchTool(ws), pattern="TODO", glob="pkg/*.py", path="src")
    assert out.split("\n")[0] == "src/pkg/util.py:2:     return 'TODO'"
    out = await run(SearchTool(ws), pattern="todo", ignore_case=True, path="src/pkg/util.py")
    assert out.split("\n")[0] == "src/pkg/util.py:2:     return 'TODO'"


async def test_search_invalid_regex(ws: Workspace) -> None:
    with pytest.raises(ToolError, match=r"invalid regular expression '\(unclosed'.*missing \)"):
        await SearchTool(ws).check({"pattern": "(unclosed"}, CTX)


async def test_search_no_match_and_limit(ws: Workspace) -> None:
    assert await run(SearchTool(ws), pattern="zzz") == "no matches for 'zzz' in ."
    out = await run(SearchTool(ws), pattern="line", path="lines.txt", max_results=3)
    assert out.split("\n")[-1].startswith("(stopped at 3 matches")


async def test_search_skips_binary_oversized_and_outside(ws: Workspace, outside: Path) -> None:
    (ws.root / "big.txt").write_text("password " * LIMIT)
    (ws.root / "bin.dat").write_bytes(b"password\x00\x00")
    (ws.root / "link_out").symlink_to(outside)
    (ws.root / "file_out").symlink_to(outside / "secret.txt")
    out = await run(SearchTool(ws), pattern="password")
    assert out.split("\n") == [
        "no matches for 'password' in .",
        "(skipped 1 files over the 4.0 KiB (4096 bytes) limit)",
    ]


# -- glob ------------------------------------------------------------------------------------------------


async def test_glob(ws: Workspace) -> None:
    assert await run(GlobTool(ws), pattern="**/*.py") == "src/main.py\nsrc/pkg/util.py"
    assert await run(GlobTool(ws), pattern="*.toml") == "pyproject.toml"
    assert await run(GlobTool(ws), pattern="src/*") == "src/main.py\nsrc/pkg/"
    assert (
        await run(GlobTool(ws), pattern="src/**")
        == "src/main.py\nsrc/pkg/\nsrc/pkg/notes.md\nsrc/pkg/util.py"
    )
    assert await run(GlobTool(ws), pattern="src/p?g/[nu]*.*") == "src/pkg/notes.md\nsrc/pkg/util.py"
    assert await run(GlobTool(ws), pattern="src/pkg/[!n]*") == "src/pkg/util.py"
    assert await run(GlobTool(ws), pattern="lines.txt") == "lines.txt"
    assert await run(GlobTool(ws), pattern=str(ws.root / "src" / "*.py")) == "src/main.py"
    assert await run(GlobTool(ws), pattern="**/*.rs") == "no paths match '**/*.rs'"


async def test_glob_cap(ws: Workspace) -> None:
    out = await run(GlobTool(ws), pattern="**", max_results=2)
    assert out.split("\n") == [
        "blob.bin",
        "lines.txt",
        "(showing 2 of 8 matches; narrow the pattern or raise max_results)",
    ]


async def test_glob_does_not_follow_symlinks_out(ws: Workspace, outside: Path) -> None:
    (ws.root / "out").symlink_to(outside)
    out = await run(GlobTool(ws), pattern="**/*.txt")
    assert out == "lines.txt"
    with pytest.raises(ToolRefused):
        await GlobTool(ws).check({"pattern": "out/*.txt"}, CTX)


@pytest.mark.parametrize("pattern", ["../*", "src/../../*", "/etc/*", "/*", "%2e%2e/*", "~/*", "..\\*"])
async def test_glob_refuses_traversal(ws: Workspace, pattern: str) -> None:
    with pytest.raises(ToolRefused):
        await GlobTool(ws).check({"pattern": pattern}, CTX)
    with pytest.raises(ToolRefused):
        await GlobTool(ws).execute({"pattern": pattern}, CTX)


async def test_a_pathological_search_neither_freezes_the_loop_nor_runs_forever(
    ws: Workspace, monkeypatch
) -> None:
    # Nested alternation: with `re` this holds the interpreter lock for far longer than anyone waits.
    (ws.root / "minified.js").write_text("a" * 200 + "!\n")
    monkeypatch.setattr(globs, "MATCH_BUDGET_S", 0.5)
    loop = asyncio.get_running_loop()
    ticks = 0

    async def heartbeat() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.02)
            ticks += 1

    beat = asyncio.create_task(heartbeat())
    started = loop.time()
    with pytest.raises(ToolError, match=r"took longer than 0\.5 s"):
        await SearchTool(ws).execute({"pattern": r"(a|aa)+$", "path": "minified.js"}, CTX)
    elapsed = loop.time() - started
    beat.cancel()
    assert elapsed < 30  # the budget ended it: the match itself would run for ages
    # The event loop kept running while the pattern was being matched.
    assert ticks >= elapsed / 0.02 / 4
