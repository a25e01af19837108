"""`dataclass`, as the standard library's, made for a fraction of its cost at import.

`dataclasses.dataclass` compiles each method it writes (`__init__`, `__repr__`, `__eq__`,
`__hash__`, a frozen class's `__setattr__` and `__delattr__`) with a compile and an exec of its
own: about 0.15 ms a class with only `__init__`, 0.55 ms a frozen one. The daemon makes some 150
record classes before it may say READY=1, and that was a third of its start. This decorator lets
`dataclasses` collect and check the fields (so `fields`, `asdict`, `replace`, `is_dataclass` and
`__match_args__` are the standard library's own) and writes the methods without a compile each:
`__repr__`, `__eq__`, `__hash__` and a frozen class's guards are closures over the field names
(`operator.attrgetter` gives the same tuples the generated code compares and hashes), and
`__init__`, the one whose speed matters per object, binds its arguments in plain Python for a
class's first few constructions and is then compiled from the standard library's own source -- a
class defined but seldom made (the config's tables, a board's devices) costs no compile at all.

Only what edgeclaw's records use takes this path; anything else (`order`, `unsafe_hash`,
`weakref_slot`, `InitVar` fields, a dataclass base class) is handed to `dataclasses.dataclass`
unchanged, so every class behaves as the standard library's would. `tests/test_records.py`
compares the two.
"""

from __future__ import annotations

import abc
import dataclasses
import inspect
import operator
import reprlib
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T")

_MISSING = dataclasses.MISSING


class _FactorySentinel:
    """The default of an `__init__` parameter whose field has a default_factory."""

    def __repr__(self) -> str:
        return "<factory>"


_HAS_DEFAULT_FACTORY = _FactorySentinel()


def _getstate(self: Any) -> list[Any]:
    return [getattr(self, f.name) for f in dataclasses.fields(self)]


def _setstate(self: Any, state: list[Any]) -> None:
    for f, value in zip(dataclasses.fields(self), state, strict=False):
        object.__setattr__(self, f.name, value)  # a frozen class's own __setattr__ refuses


@overload
def dataclass(cls: type[T], /) -> type[T]: ...


@overload
def dataclass(
    *,
    init: bool = True,
    repr: bool = True,
    eq: bool = True,
    order: bool = False,
    unsafe_hash: bool = False,
    frozen: bool = False,
    match_args: bool = True,
    kw_only: bool = False,
    slots: bool = False,
    weakref_slot: bool = False,
) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def dataclass(cls: Any = None, /, **options: Any) -> Any:
    """`dataclasses.dataclass`, with the same parameters and the same classes as a result."""

    def wrap(cls: type[T]) -> type[T]:
        return _process(cls, **options)

    return wrap if cls is None else wrap(cls)


_DEFAULTS: dict[str, bool] = {
    "init": True,
    "repr": True,
    "eq": True,
    "order": False,
    "unsafe_hash": False,
    "frozen": False,
    "match_args": True,
    "kw_only": False,
    "slots": False,
    "weakref_slot": False,
}


def _process(cls: type[T], **options: bool) -> type[T]:
    unknown = set(options) - set(_DEFAULTS)
    if unknown:
        raise TypeError(f"dataclass() got an unexpected keyword argument {sorted(unknown)[0]!r}")
    standard = {**_DEFAULTS, **options}
    init, show, eq, frozen, slots = (standard[k] for k in ("init", "repr", "eq", "frozen", "slots"))
    order, unsafe_hash, weakref_slot = standard["order"], standard["unsafe_hash"], standard["weakref_slot"]
    if (
        order
        or unsafe_hash
        or weakref_slot
        or any(hasattr(b, "__dataclass_fields__") for b in cls.__mro__[1:])
        or any("InitVar" in str(a) for a in inspect.get_annotations(cls).values())
    ):
        # An InitVar is passed on to __post_init__; a base's fields and frozenness are checked against
        # it: the standard library's own code does those.
        return dataclasses.dataclass(cls, **standard)  # type: ignore[call-overload,no-any-return]
    own_doc = bool(cls.__dict__.get("__doc__"))
    if not own_doc:
        cls.__doc__ = "-"  # written below, from the fields: the standard library would ask inspect
    class_hash = cls.__dict__.get("__hash__", _MISSING)
    has_explicit_hash = not (class_hash is _MISSING or (class_hash is None and "__eq__" in cls.__dict__))
    # Fields collected and checked, defaults set, __match_args__ and slots made; no method written.
    made: Any = dataclasses.dataclass(  # type: ignore[call-overload]
        cls,
        init=False,
        repr=False,
        eq=False,
        frozen=False,
        match_args=standard["match_args"],
        kw_only=standard["kw_only"],
        slots=slots,
    )
    fields = list(dataclasses.fields(made))
    params_type = type(made.__dataclass_params__)
    made.__dataclass_params__ = params_type(**{name: standard[name] for name in params_type.__slots__})

    if init and "__init__" not in made.__dict__:
        made.__init__ = _lazy_init(made, _init_source(made, fields, frozen, slots), frozen, slots)
    if show and "__repr__" not in made.__dict__:
        made.__repr__ = _repr_method(made, tuple(f.name for f in fields if f.repr))
    if eq and "__eq__" not in made.__dict__:
        made.__eq__ = _eq_method(made, _values([f.name for f in fields if f.compare]))
    if frozen:
        for name in ("__setattr__", "__delattr__"):
            if name in made.__dict__:
                raise TypeError(f"Cannot overwrite attribute {name} in class {made.__name__}")
        made.__setattr__, made.__delattr__ = _frozen_methods(made, frozenset(f.name for f in fields))
    if eq and frozen and not has_explicit_hash:
        hashed = [f.name for f in fields if (f.compare if f.hash is None else f.hash)]
        made.__hash__ = _hash_method(made, _values(hashed))
    if eq and not frozen and not has_explicit_hash:
        made.__hash__ = None  # mutable and compared by value: unhashable, as the standard library makes it
    if frozen and slots:
        # A frozen class with slots is pickled and copied through these (its __setattr__ refuses).
        if "__getstate__" not in made.__dict__:
            made.__getstate__ = _getstate
        if "__setstate__" not in made.__dict__:
            made.__setstate__ = _setstate
    if not own_doc:
        made.__doc__ = made.__name__ + _signature_text(fields if init else [])
    abc.update_abstractmethods(made)
    return made  # type: ignore[no-any-return]


def _named(cls: type, fn: Callable[..., Any]) -> Callable[..., Any]:
    fn.__qualname__ = f"{cls.__qualname__}.{fn.__name__}"
    return fn


def _values(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The tuple of these attributes of an object, as the standard library's methods compare and hash."""
    if not names:
        return lambda obj: ()
    get = operator.attrgetter(*names)
    if len(names) == 1:
        return lambda obj: (get(obj),)
    return get  # several names: attrgetter gives the tuple itself


# Constructions a class gets through `_interpreted_init` before its __init__ is compiled: a record
# made a few times (the config's tables, a board's devices) never pays for a compile, one made per
# request soon runs the compiled code.
INTERPRETED_CONSTRUCTIONS = 8


def _lazy_init(cls: type, source: str, frozen: bool, slots: bool) -> Callable[..., None]:
    """`__init__`: the first constructions bind their arguments here, then `source` (the standard
    library's own __init__ for these fields) is compiled and takes over. Anything the interpreted
    path does not bind exactly (a wrong or missing argument) goes to the compiled one, whose error
    is the standard library's."""
    fields = [f for f in dataclasses.fields(cls) if f.init or f.default_factory is not _MISSING or slots]
    positional = [f.name for f in fields if f.init and not f.kw_only]
    accepted = frozenset(f.name for f in fields if f.init)
    required = [f.name for f in fields if f.init and f.default is _MISSING and f.default_factory is _MISSING]
    post_init = hasattr(cls, "__post_init__")
    setter = object.__setattr__ if frozen else setattr
    left = [INTERPRETED_CONSTRUCTIONS]

    def _interpreted_init(self: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        if len(args) > len(positional):
            return False
        given = dict(zip(positional, args, strict=False))
        for name, value in kwargs.items():
            if name in given or name not in accepted:
                return False
            given[name] = value
        if any(name not in given for name in required):
            return False
        for f in fields:  # in field order, factories called as the compiled code calls them
            if f.init and f.name in given:
                value = given[f.name]
            elif f.default_factory is not _MISSING:
                value = f.default_factory()
            elif f.default is not _MISSING and (f.init or slots):
                value = f.default
            else:
                continue
            setter(self, f.name, value)
        if post_init:
            self.__post_init__()
        return True

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if left[0] > 0:
            left[0] -= 1
            if _interpreted_init(self, args, kwargs):
                return
        real = cls.__dict__["__init__"]
        if real is __init__:
            namespace = dict(_INIT_NAMES)
            namespace.update(_init_defaults(cls))
            exec(source, namespace)
            real = _named(cls, namespace["__init__"])
            cls.__init__ = real  # type: ignore[misc]
        real(self, *args, **kwargs)

    return _named(cls, __init__)


def _repr_method(cls: type, names: tuple[str, ...]) -> Callable[[Any], str]:
    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{self.__class__.__qualname__}({shown})"

    return reprlib.recursive_repr("...")(_named(cls, __repr__))


def _eq_method(cls: type, values: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any, Any], Any]:
    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    return _named(cls, __eq__)


def _hash_method(cls: type, values: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any], int]:
    def __hash__(self: Any) -> int:
        return hash(values(self))

    return _named(cls, __hash__)


def _frozen_methods(cls: type, names: frozenset[str]) -> tuple[Callable[..., None], Callable[..., None]]:
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return _named(cls, __setattr__), _named(cls, __delattr__)


# What every generated __init__ refers to besides its defaults.
_INIT_NAMES: dict[str, Any] = {
    "_HAS_DEFAULT_FACTORY": _HAS_DEFAULT_FACTORY,
    "_object_setattr": object.__setattr__,
}


def _init_defaults(cls: type) -> dict[str, Any]:
    """`_dflt_NAME` for each field's default or default_factory, as `_init_source` names them."""
    defaults: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default_factory is not _MISSING:
            defaults[f"_dflt_{f.name}"] = f.default_factory
        elif f.default is not _MISSING:
            defaults[f"_dflt_{f.name}"] = f.default
    return defaults


def _init_source(cls: type, fields: list[dataclasses.Field[Any]], frozen: bool, slots: bool) -> str:
    """The standard library's `__init__` for these fields, as source (defaults named `_dflt_NAME`).
    Written when the class is made, so a bad order of fields is refused then, as there."""
    positional: list[str] = []
    keyword: list[str] = []
    seen_default = False
    for f in fields:
        if not f.init:
            continue
        if f.default is not _MISSING:
            param = f"{f.name}=_dflt_{f.name}"
        elif f.default_factory is not _MISSING:
            param = f"{f.name}=_HAS_DEFAULT_FACTORY"
        else:
            param = f.name
            if seen_default and not f.kw_only:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")
        if f.kw_only:
            keyword.append(param)
        else:
            seen_default = seen_default or param != f.name
            positional.append(param)
    params = ["self", *positional, *(["*", *keyword] if keyword else [])]
    body: list[str] = []
    for f in fields:
        factory = f.default_factory
        if factory is not _MISSING:
            if f.init:
                value = f"_dflt_{f.name}() if {f.name} is _HAS_DEFAULT_FACTORY else {f.name}"
            else:
                value = f"_dflt_{f.name}()"
        elif f.init:
            value = f.name
        elif slots and f.default is not _MISSING:
            value = f"_dflt_{f.name}"
        else:
            continue
        body.append(f"_object_setattr(self, {f.name!r}, {value})" if frozen else f"self.{f.name} = {value}")
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    lines = "".join(f"  {line}\n" for line in body or ["pass"])
    return f"def __init__({', '.join(params)}):\n{lines}"


def _signature_text(fields: list[dataclasses.Field[Any]]) -> str:
    """`(name: type = default, ...)`, as the standard library writes a class's missing docstring."""
    parts: list[str] = []
    keyword = False
    for f in fields:
        if not f.init:
            continue
        if f.kw_only and not keyword:
            parts.append("*")
            keyword = True
        text = f"{f.name}: {inspect.formatannotation(f.type)}"
        if f.default is not _MISSING:
            text += f" = {f.default!r}"
        elif f.default_factory is not _MISSING:
            text += " = <factory>"
        parts.append(text)
    return "(" + ", ".join(parts) + ")"


__all__ = ["dataclass"]
