"""`edgeclaw.records.dataclass` makes the classes `dataclasses.dataclass` makes, only cheaper.

Each shape of record the code base writes is made both ways from the same class body, and the two
are compared by what they do: construction, defaults and factories, repr, equality, hashing,
frozenness, slots, pickling and copying, `fields`, `asdict`, `replace`, `__match_args__` and the
docstring written for a class without one.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
import re
from dataclasses import KW_ONLY, field
from typing import Any, ClassVar

import pytest

from edgeclaw import records


def both(**options: Any):
    """The class made by the standard library and by edgeclaw.records, from one body."""

    def make(body: type) -> tuple[type, type]:
        pair = []
        for deco in (dataclasses.dataclass, records.dataclass):
            # Fresh Field objects for each: making a class writes its name and kw_only into them.
            namespace = {
                k: copy.copy(v) if isinstance(v, dataclasses.Field) else v
                for k, v in vars(body).items()
                if k not in ("__dict__", "__weakref__")
            }
            cls = type(body.__name__, (), namespace)
            cls.__module__ = __name__
            made = deco(**options)(cls)
            pair.append(made)
        return tuple(pair)  # type: ignore[return-value]

    return make


class Plain:
    """A record."""

    name: str
    count: int = 3
    tags: list[str] = field(default_factory=list)
    hidden: str = field(default="h", repr=False, compare=False)
    later: list[int] = field(default_factory=lambda: [1], init=False)
    kind: ClassVar[str] = "plain"


class NoDoc:
    a: int
    b: str = "x"
    c: dict[str, int] = field(default_factory=dict)


class KwOnly:
    """Keyword-only fields after the marker."""

    a: int
    _: KW_ONLY
    b: int
    c: int = 2


class WithPostInit:
    """__post_init__ runs after the fields are set."""

    a: int
    b: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "b", self.a * 2)


class ExplicitHash:
    """A __hash__ of its own is kept."""

    a: int

    def __hash__(self) -> int:
        return 7


SHAPES = [
    ({}, Plain),
    ({"repr": False, "eq": False}, Plain),
    ({"frozen": True}, Plain),
    ({"frozen": True, "slots": True}, Plain),
    ({"slots": True}, Plain),
    ({"frozen": True, "eq": False}, Plain),
    ({}, NoDoc),
    ({"frozen": True, "slots": True}, NoDoc),
    ({}, KwOnly),
    ({"kw_only": True}, NoDoc),
    ({"frozen": True}, WithPostInit),
    ({}, WithPostInit),
    ({"frozen": True}, ExplicitHash),
    ({}, ExplicitHash),
]


def _build(cls: type) -> tuple[Any, Any]:
    if cls.__name__ == "Plain":
        return cls("n", 4, ["t"]), cls(name="n", count=4, tags=["t"], hidden="other")
    if cls.__name__ == "NoDoc":
        return cls(a=1), cls(a=1, b="x")
    if cls.__name__ == "KwOnly":
        return cls(1, b=2), cls(a=1, b=2, c=2)
    return cls(1), cls(a=1)


def _behaviour(cls: type) -> dict[str, Any]:
    one, two = _build(cls)
    seen: dict[str, Any] = {
        "fields": [(f.name, f.type, f.init, f.repr, f.compare, f.kw_only) for f in dataclasses.fields(cls)],
        "asdict": dataclasses.asdict(one),
        "repr": re.sub(r" at 0x[0-9a-f]+", "", repr(one).replace(cls.__qualname__, "C")),
        "eq": one == two,
        "eq_other": one == object(),
        "match_args": getattr(cls, "__match_args__", None),
        "doc": cls.__doc__,
        "params": str(cls.__dataclass_params__),
        "slots": getattr(cls, "__slots__", None),
        "replace": dataclasses.asdict(dataclasses.replace(one)) if _replaceable(cls) else None,
    }
    try:
        seen["hash"] = hash(one) == hash(two)
    except TypeError as e:
        seen["hash"] = str(e)
    for action in (
        lambda: setattr(one, "a" if hasattr(one, "a") else "name", 9),
        lambda: delattr(one, "a" if hasattr(one, "a") else "name"),
    ):
        try:
            action()
            seen.setdefault("mutations", []).append("ok")
        except Exception as e:
            seen.setdefault("mutations", []).append(f"{type(e).__name__}: {e}")
    fresh, _ = _build(cls)
    seen["copy"] = dataclasses.asdict(copy.copy(fresh))
    seen["deepcopy"] = dataclasses.asdict(copy.deepcopy(fresh))
    try:
        with pytest.raises(TypeError) as missing:
            cls()
        seen["missing"] = str(missing.value).replace(cls.__qualname__, "C")
    except pytest.fail.Exception:
        seen["missing"] = "no error"
    return seen


def _replaceable(cls: type) -> bool:
    return all(f.init or f.default_factory is not dataclasses.MISSING for f in dataclasses.fields(cls))


@pytest.mark.parametrize("interpreted", [0, 1000], ids=["compiled-init", "interpreted-init"])
@pytest.mark.parametrize(("options", "body"), SHAPES, ids=[f"{b.__name__}-{o}" for o, b in SHAPES])
def test_the_records_behave_as_the_standard_librarys(
    options: dict[str, Any], body: type, interpreted: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both ways an __init__ runs: bound by the interpreted path (the first constructions), and
    compiled from the standard library's source (after them, or for a call it does not bind)."""
    monkeypatch.setattr(records, "INTERPRETED_CONSTRUCTIONS", interpreted)
    standard, cheap = both(**options)(body)
    assert _behaviour(cheap) == _behaviour(standard)


def test_a_wrong_call_gets_the_standard_librarys_error_on_either_path() -> None:
    standard, cheap = both(frozen=True)(NoDoc)
    for call in ((), (1, "x", {}, 4), {"a": 1, "zz": 2}):
        args, kwargs = (call, {}) if isinstance(call, tuple) else ((), call)
        errors = []
        for cls in (standard, cheap):
            with pytest.raises(TypeError) as e:
                cls(*args, **kwargs)
            errors.append(str(e.value))
        assert errors[0] == errors[1]


def test_pickled_and_back() -> None:
    made = pickle.loads(pickle.dumps(Pickled(1, ("a",))))
    assert made == Pickled(1, ("a",)) and hash(made) == hash(Pickled(1, ("a",)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.a = 2  # type: ignore[misc]


@records.dataclass(frozen=True, slots=True)
class Pickled:
    """Module level, so pickle finds it."""

    a: int
    b: tuple[str, ...] = ()


def test_a_non_default_field_after_a_default_one_is_refused_alike() -> None:
    class Wrong:
        a: int = 1
        b: int

    for deco in (dataclasses.dataclass, records.dataclass):
        with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):
            deco(type("Wrong", (), dict(vars(Wrong))))


def test_what_it_does_not_write_itself_goes_to_the_standard_library() -> None:
    """order, unsafe_hash and a dataclass base: the standard library's own result."""

    @records.dataclass(order=True)
    class Ordered:
        a: int

    assert Ordered(1) < Ordered(2)

    @records.dataclass(frozen=True)
    class Base:
        a: int

    @records.dataclass(frozen=True)
    class Derived(Base):
        b: int = 0

    assert Derived(1, 2) == Derived(1, 2) and dataclasses.fields(Derived)[0].name == "a"
    with pytest.raises(TypeError, match="cannot inherit non-frozen dataclass from a frozen one"):

        @records.dataclass
        class Thawed(Base):
            c: int = 0


def test_a_frozen_class_may_not_write_its_own_setattr() -> None:
    class Own:
        a: int

        def __setattr__(self, name: str, value: Any) -> None: ...

    for deco in (dataclasses.dataclass, records.dataclass):
        with pytest.raises(TypeError, match="Cannot overwrite attribute __setattr__"):
            deco(frozen=True)(type("Own", (), dict(vars(Own))))


def test_init_is_compiled_only_after_the_first_constructions() -> None:
    @records.dataclass(frozen=True)
    class Often:
        a: int
        b: list[int] = field(default_factory=list)

    def compiled() -> bool:
        return "args" not in Often.__dict__["__init__"].__code__.co_varnames

    for n in range(records.INTERPRETED_CONSTRUCTIONS):
        assert Often(n).a == n and not compiled()
    made = Often(1, [2])
    assert compiled() and made == Often(a=1, b=[2]) and Often(3).b == []
