"""Each tool's group is declared once (`edgeclaw.tool_groups`): the tool classes, the policy's groups
and the families built on first use all agree with it."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import edgeclaw.tools
from edgeclaw.config.policy_rules import BUILTIN_GROUPS, KNOWN_TOOL_NAMES, PolicyRules
from edgeclaw.tool_groups import (
    AGENT_TOOLS,
    GROUP_OF,
    HARDWARE_TOOLS,
    MEDIA_TOOLS,
    MEMORY_TOOLS,
    RESERVED_NAMES,
    TOOL_GROUPS,
)
from edgeclaw.tools.base import Tool, ToolContext
from edgeclaw.tools.policy import PolicyEngine
from edgeclaw.tools.registry import Registry


def _tool_classes() -> dict[str, type[Tool]]:
    for module in pkgutil.walk_packages(edgeclaw.tools.__path__, "edgeclaw.tools."):
        importlib.import_module(module.name)
    found: dict[str, type[Tool]] = {}
    pending = list(Tool.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__module__.startswith("edgeclaw.tools.") and isinstance(cls.__dict__.get("name"), str):
            found[cls.__dict__["name"]] = cls
    return found


def test_every_tool_class_is_listed_under_its_own_group() -> None:
    classes = _tool_classes()
    assert {name: cls.group for name, cls in classes.items()} == GROUP_OF


def test_each_tool_lives_in_the_package_of_its_group() -> None:
    for name, cls in _tool_classes().items():
        assert cls.__module__.split(".")[2] == cls.group, (name, cls.__module__)


def test_the_policy_groups_are_the_declared_ones() -> None:
    assert BUILTIN_GROUPS == TOOL_GROUPS
    # Policy lists may also name the reserved names (they match no tool), as they always could.
    assert set(GROUP_OF) == KNOWN_TOOL_NAMES - RESERVED_NAMES
    assert not RESERVED_NAMES & set(GROUP_OF)


def test_the_deferred_families_take_their_groups_from_the_declaration() -> None:
    for family in (AGENT_TOOLS, HARDWARE_TOOLS, MEDIA_TOOLS, MEMORY_TOOLS):
        assert all(GROUP_OF[name] == group for name, group in family.items())


def test_the_registry_refuses_a_tool_whose_group_disagrees() -> None:
    class Misfiled(Tool):
        name = "exec"
        group = "fs"
        description = "exec, filed under the wrong group"

        async def execute(self, args, ctx: ToolContext) -> str:
            return ""

    with pytest.raises(ValueError, match="lists it under 'runtime'"):
        Registry(PolicyEngine(PolicyRules())).register(Misfiled())


def test_the_registry_refuses_a_deferred_family_whose_groups_disagree() -> None:
    with pytest.raises(ValueError, match="lists it under 'hardware'"):
        Registry(PolicyEngine(PolicyRules())).register_deferred({"camera": "media"}, list)
