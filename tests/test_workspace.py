"""Workspace.resolve against a traversal and symlink corpus, plus display and the descriptor check.

Layout (under pytest's tmp_path, called `base`)::

    base/ws/            the workspace root
    base/ws/sub/a.txt
    base/ws2/file       sibling sharing the root's name as a prefix
    base/outside/secret
    base/extra/         an extra allowed prefix
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.tools.fs import workspace
from edgeclaw.tools.fs.workspace import Workspace


@pytest.fixture
def base(tmp_path: Path) -> Path:
    (tmp_path / "ws" / "sub").mkdir(parents=True)
    (tmp_path / "ws" / "sub" / "a.txt").write_text("a\n")
    (tmp_path / "ws2").mkdir()
    (tmp_path / "ws2" / "file").write_text("sibling\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("secret\n")
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "data.txt").write_text("extra\n")
    return tmp_path


@pytest.fixture
def ws(base: Path) -> Workspace:
    return Workspace(base / "ws", extra_paths=(base / "extra",))


# -- refused by the text alone ------------------------------------------------------

TEXT_CORPUS = [
    "../../etc/passwd",
    "..",
    "a/..",
    "a/../../b",
    "sub/../sub/a.txt",  # would stay inside: still refused (fail closed)
    "./../x",
    "%2e%2e/%2e%2e/etc/passwd",
    "%2E%2E/x",
    "..%2fetc",
    "a%2fb",
    "a%5cb",
    "a%00b",
    "%252e%252e/x",  # double encoding
    "%25252e/x",  # triple encoding
    "%2525252525252e/x",  # nested deeper than the decoder goes
    "%c0%ae%c0%ae/x",  # overlong UTF-8 for '.'
    "..\\..\\windows",
    "sub\\..\\..\\x",
    "foo\x00bar",
    "foo\nbar",
    "",
    "   ",
    "~",
    "~/notes.txt",
    "~root/.ssh/id_rsa",
    "x" * 5000,
]


@pytest.mark.parametrize("user_path", TEXT_CORPUS)
def test_text_corpus_refused(ws: Workspace, user_path: str) -> None:
    with pytest.raises(ToolRefused) as info:
        ws.resolve(user_path)
    assert "refused path" in str(info.value)


def test_refusal_names_path_and_reason(ws: Workspace) -> None:
    with pytest.raises(ToolRefused, match=r"'\.\./\.\./etc/passwd'.*'\.\.' components"):
        ws.resolve("../../etc/passwd")
    with pytest.raises(ToolRefused, match="NUL"):
        ws.resolve("foo\x00bar")
    with pytest.raises(ToolRefused, match="percent-encoded"):
        ws.resolve("%252e%252e/x")
    with pytest.raises(ToolRefused, match="empty"):
        ws.resolve("")


def test_non_string_refused(ws: Workspace) -> None:
    with pytest.raises(ToolRefused, match="string"):
        ws.resolve(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "user_path",
    ["report%20v2.txt", "100%25 done.txt", "a%zz", "...", "a..b", "sub/./a.txt", "a\\b", "a/~b"],
)
def test_harmless_names_allowed(ws: Workspace, user_path: str) -> None:
    assert ws.contains(ws.resolve(user_path))


# -- refused after resolution ----------------------------------------------------------


def test_absolute_outside_refused(ws: Workspace) -> None:
    with pytest.raises(ToolRefused, match="outside the workspace"):
        ws.resolve("/etc/passwd")


def test_sibling_sharing_root_prefix_refused(ws: Workspace, base: Path) -> None:
    # root is base/ws; base/ws2/file starts with the same characters (the startswith bug)
    with pytest.raises(ToolRefused, match="outside"):
        ws.resolve(str(base / "ws2" / "file"))
    with pytest.raises(ToolRefused):
        ws.resolve(str(base / "ws2"))


def test_symlink_to_etc_refused(ws: Workspace) -> None:
    (ws.root / "etc_link").symlink_to("/etc")
    with pytest.raises(ToolRefused, match="symlink"):
        ws.resolve("etc_link")
    with pytest.raises(ToolRefused, match="symlink"):
        ws.resolve("etc_link/passwd")


def test_path_through_symlinked_outside_dir_refused(ws: Workspace, base: Path) -> None:
    (ws.root / "sub" / "out").symlink_to(base / "outside")
    with pytest.raises(ToolRefused):
        ws.resolve("sub/out/secret", must_exist=True)
    with pytest.raises(ToolRefused):
        ws.resolve("sub/out/new_file", for_write=True)


def test_dangling_symlink_outside_refused_as_write_target(ws: Workspace, base: Path) -> None:
    (ws.root / "dangling").symlink_to(base / "outside" / "not_yet")
    with pytest.raises(ToolRefused):
        ws.resolve("dangling", for_write=True)
    assert not (base / "outside" / "not_yet").exists()


def test_symlink_inside_allowed(ws: Workspace) -> None:
    (ws.root / "alias").symlink_to(ws.root / "sub")
    assert ws.resolve("alias/a.txt", must_exist=True) == ws.root / "sub" / "a.txt"


def test_symlinked_root_is_resolved(base: Path) -> None:
    (base / "ws_link").symlink_to(base / "ws")
    linked = Workspace(base / "ws_link")
    assert linked.root == (base / "ws").resolve()
    assert linked.resolve(str(base / "ws_link" / "sub" / "a.txt")) == linked.root / "sub" / "a.txt"


# -- allowed ------------------------------------------------------------------------------


def test_relative_path(ws: Workspace) -> None:
    assert ws.resolve("sub/a.txt", must_exist=True) == ws.root / "sub" / "a.txt"


def test_absolute_path_inside_allowed(ws: Workspace) -> None:
    assert ws.resolve(str(ws.root / "sub" / "a.txt")) == ws.root / "sub" / "a.txt"
    assert ws.resolve(str(ws.root)) == ws.root
    assert ws.resolve(".") == ws.root


def test_extra_prefix_allowed(ws: Workspace, base: Path) -> None:
    assert ws.resolve(str(base / "extra" / "data.txt"), must_exist=True) == base / "extra" / "data.txt"
    assert ws.resolve(str(base / "extra" / "new" / "deep.txt"), for_write=True).parent.name == "new"


def test_nonexistent_write_target_allowed(ws: Workspace) -> None:
    assert ws.resolve("new/dir/file.txt", for_write=True) == ws.root / "new" / "dir" / "file.txt"


# -- must_exist / for_write ------------------------------------------------------------------


def test_must_exist_missing_is_tool_error(ws: Workspace) -> None:
    with pytest.raises(ToolError, match="no such file"):
        ws.resolve("nope.txt", must_exist=True)


def test_for_write_directory_is_tool_error(ws: Workspace) -> None:
    with pytest.raises(ToolError, match="directory"):
        ws.resolve("sub", for_write=True)
    with pytest.raises(ToolError, match="directory"):
        ws.resolve("newdir/", for_write=True)


# -- display, construction, descriptors ---------------------------------------------------------


def test_display(ws: Workspace, base: Path) -> None:
    assert ws.display(ws.root) == "."
    assert ws.display(ws.root / "sub" / "a.txt") == "sub/a.txt"
    assert ws.display(base / "extra" / "data.txt") == str(base / "extra" / "data.txt")


def test_construction_normalises(base: Path) -> None:
    w = Workspace(str(base / "ws" / "sub" / ".."), extra_paths=[str(base / "extra")])  # type: ignore[arg-type]
    assert w.root == base / "ws"
    assert w.extra_paths == (base / "extra",)
    with pytest.raises(ValueError):
        Workspace(base, max_file_bytes=0)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_verify_fd_refuses_descriptor_outside(ws: Workspace, base: Path) -> None:
    fd = os.open(base / "outside" / "secret", os.O_RDONLY)
    try:
        with pytest.raises(ToolRefused, match="redirected"):
            ws.verify_fd(fd, "secret")
    finally:
        os.close(fd)
    fd = os.open(ws.root / "sub" / "a.txt", os.O_RDONLY)
    try:
        ws.verify_fd(fd, "sub/a.txt")
    finally:
        os.close(fd)


def test_open_refuses_symlink_swapped_in(ws: Workspace, base: Path) -> None:
    # resolve() said fine, then the file became a symlink to the outside before open().
    target = ws.resolve("swap.txt", for_write=True)
    target.symlink_to(base / "outside" / "secret")
    with pytest.raises(ToolRefused):
        ws.open(target, os.O_RDONLY)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_open_dir_refuses_directory_swapped_for_symlink_parent(ws: Workspace, base: Path) -> None:
    # A parent directory swapped for a symlink: O_NOFOLLOW only guards the last
    # component, so this is the descriptor check's job.
    (ws.root / "d").symlink_to(base / "outside")
    with pytest.raises(ToolRefused):
        ws.open(ws.root / "d" / "secret", os.O_RDONLY)


def test_without_proc_the_descriptor_check_refuses(
    ws: Workspace, base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An unverifiable descriptor is refused, not trusted: fail closed.
    monkeypatch.setattr(workspace, "_PROC_FD", str(base / "no-proc"))
    with pytest.raises(ToolRefused, match="cannot check where it leads"):
        ws.open(ws.root / "sub" / "a.txt", os.O_RDONLY)


@pytest.mark.parametrize("flags", [{}, {"must_exist": True}, {"for_write": True}])
def test_a_name_too_long_is_a_tool_error(ws: Workspace, flags: dict[str, bool]) -> None:
    with pytest.raises(ToolError, match="too long"):
        ws.resolve("sub/" + "n" * 300, **flags)


def test_make_dirs_creates_levels_inside(ws: Workspace) -> None:
    fd = ws.make_dirs(ws.root / "new" / "deeper")
    os.close(fd)
    assert (ws.root / "new" / "deeper").is_dir()


def test_make_dirs_does_not_follow_a_symlink_raced_in(ws: Workspace, base: Path) -> None:
    # resolve() saw no "d"; before the directories were made, "d" became a symlink to the outside.
    target = ws.resolve("d/made/file.txt", for_write=True)
    (ws.root / "d").symlink_to(base / "outside")
    with pytest.raises(ToolRefused, match="became a symlink"):
        ws.make_dirs(target.parent)
    assert not (base / "outside" / "made").exists()


# -- read_file: the one way every reader takes ------------------------------------------------------


def test_read_file_reads_through_one_checked_descriptor(ws: Workspace, base: Path) -> None:
    content = ws.read_file(ws.resolve("sub/a.txt"))
    assert content.data == b"a\n" and content.size == 2 and not content.truncated


def test_read_file_refuses_a_symlink_met_at_any_component(ws: Workspace, base: Path) -> None:
    # Both were fine when resolved; then the file, or a directory above it, became a symlink out.
    target = ws.resolve("sub/a.txt")
    (ws.root / "sub" / "a.txt").unlink()
    (ws.root / "sub" / "a.txt").symlink_to(base / "outside" / "secret")
    with pytest.raises(ToolRefused, match="symlink"):
        ws.read_file(target)
    (ws.root / "sub").rename(base / "sub-away")
    (ws.root / "sub").symlink_to(base / "outside")
    with pytest.raises(ToolRefused, match="became a symlink"):
        ws.read_file(ws.root / "sub" / "secret")


def test_read_file_checks_type_links_and_size_on_the_descriptor(ws: Workspace, base: Path) -> None:
    os.mkfifo(ws.root / "pipe")
    with pytest.raises(ToolError, match="not a regular file"):
        ws.read_file(ws.root / "pipe")  # and does not hang: opened non-blocking
    with pytest.raises(workspace.IsADirectory):
        ws.read_file(ws.root / "sub")
    os.link(base / "outside" / "secret", ws.root / "linked")
    with pytest.raises(ToolRefused, match="2 hard links"):
        ws.read_file(ws.root / "linked")
    (ws.root / "big").write_bytes(b"x" * 100)
    with pytest.raises(workspace.FileTooLarge, match="100 bytes, over the 99 bytes file limit") as info:
        ws.read_file(ws.root / "big", limit=99)
    assert info.value.size == 100
    cut = ws.read_file(ws.root / "big", limit=10, cut=True)
    assert cut.data == b"x" * 10 and cut.truncated and cut.size == 100


def test_a_link_swapped_while_being_resolved_is_a_refusal(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # os.path.realpath reads a link lstat saw a moment before; a swap in between makes it fail.
    def racing_realpath(path: str) -> str:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(workspace.os.path, "realpath", racing_realpath)
    with pytest.raises(ToolRefused, match="changed while being checked"):
        ws.resolve("sub/a.txt")
