"""An MCP server whose tools take Pydantic models, built with the official SDK, on stdio: its input
schemas carry what generated schemas carry (`$defs` and `$ref` for nested models and enums,
`anyOf: [X, {"type": "null"}]` for Optional fields, `format` for dates, a model that contains
itself, a discriminated union: `oneOf` with a `discriminator`). Each tool answers with the arguments
it received, as JSON, so a test sees what reached it."""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel, Field


class Mode(StrEnum):
    walk = "walk"
    train = "train"


class Stop(BaseModel):
    place: str
    minutes: int = Field(ge=0)
    note: str | None = None


class Trip(BaseModel):
    name: str
    mode: Mode = Mode.train
    stops: list[Stop]


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int = 9


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool = True


class Node(BaseModel):
    label: str
    children: list[Node] = []


def build() -> MCPServer:
    server = MCPServer("edgeclaw-models")

    @server.tool(description="Plan a trip: its stops in order.")
    def plan(trip: Trip) -> str:
        return json.dumps(trip.model_dump(mode="json"))

    @server.tool(description="Say what arrived, nulls included.")
    def maybe(count: int | None = None, label: str | None = None) -> str:
        return json.dumps({"count": count, "label": label})

    @server.tool(description="The weekday of a moment.")
    def weekday(at: datetime) -> str:
        return at.strftime("%A")

    @server.tool(description="Count the labels of a tree.")
    def tree(root: Node) -> str:
        def count(n: Node) -> int:
            return 1 + sum(count(c) for c in n.children)

        return str(count(root))

    @server.tool(description="Describe a pet, and maybe its companion.")
    def pet(
        pet: Annotated[Cat | Dog, Field(discriminator="kind")],
        companion: Cat | None = None,
        tag: int | str = 0,
    ) -> str:
        # The discriminated union is a oneOf with a `discriminator`; the Optional model an anyOf of a
        # $ref and null; `int | str` an anyOf of two types.
        return json.dumps(
            {"pet": pet.model_dump(), "companion": companion and companion.model_dump(), "tag": tag}
        )

    return server


if __name__ == "__main__":
    build().run("stdio")
