"""One way between the typed report and its stored JSON form, and the JSON Schema of that form.

``to_dict`` and ``from_dict`` work on any frozen dataclass of the model, driven by its type
hints: a dataclass is an object of its fields, an enum its value, a tuple a list. A class may
list ``DERIVED`` properties (name -> type): written for readers of the JSON (counts, the
effective status), ignored when read back. A field with ``metadata={"stored": False}`` (the raw
bundle, kept beside the report) is neither written nor read. ``json_schema`` derives the schema
from the same hints, so the published schema and the code cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
import types
import typing
from functools import cache
from typing import Any, TypeVar, get_args, get_origin

T = TypeVar("T")

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


class FormatError(ValueError):
    """A stored document that does not have the report's shape; the message names where."""


def _stored_fields(cls: type) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(cls) if f.metadata.get("stored", True)]


@cache
def _hints(cls: type) -> dict[str, Any]:
    """The types of the stored fields (annotations are strings under ``from __future__ import
    annotations``: evaluated in the class's module, as typing.get_type_hints does; fields not
    stored may name types imported only for type checking)."""
    namespace = vars(sys.modules[cls.__module__])
    return {f.name: eval(f.type, namespace) if isinstance(f.type, str) else f.type  # noqa: S307
            for f in _stored_fields(cls)}


def _derived(cls: type) -> dict[str, Any]:
    return dict(getattr(cls, "DERIVED", {}))


def to_dict(obj: Any) -> Any:
    """The JSON form of a model object (dataclass, enum, tuple, dict or plain value)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {}
        for f in _stored_fields(type(obj)):
            value = getattr(obj, f.name)
            digits = f.metadata.get("round")
            out[f.name] = round(value, digits) if digits is not None else to_dict(value)
        for name in _derived(type(obj)):
            value = getattr(obj, name)
            out[name] = to_dict(value() if callable(value) else value)  # a property or a method
        return out
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


def document(obj: Any) -> dict[str, Any]:
    """The JSON object of one model dataclass (``to_dict`` typed for the one shape it gives it)."""
    out = to_dict(obj)
    if not isinstance(out, dict):
        raise TypeError(f"{type(obj).__name__} is not a dataclass of the model")
    return out


def from_dict(cls: type[T], data: Any) -> T:
    """The typed object of a JSON form; FormatError names the first path that does not fit."""
    try:
        out: T = _decoder(typing.cast(Any, cls))(data)
    except _Misfit as exc:
        raise FormatError(f"{cls.__name__}{''.join(reversed(exc.at))}: {exc.what}") from None
    return out


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (typing.Union, types.UnionType)


class _Misfit(Exception):
    """Where a value does not fit, from inside out: each container on the way adds its key
    (paths are made only for a value that does not fit: a stored report decodes 3x faster)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what
        self.at: list[str] = []


def _not(value: Any, wanted: str) -> _Misfit:
    shown = repr(value)
    return _Misfit(f"{shown[:60]}{'...' if len(shown) > 60 else ''} is not {wanted}")


Decoder = typing.Callable[[Any], Any]


def _same(value: Any) -> Any:
    return value


@cache
def _decoder(tp: Any) -> Decoder:  # noqa: PLR0911 (one branch per kind)
    """The decoder of one type of the model, made once per type from its hints."""
    if tp is Any:
        return _same
    if _is_union(tp):
        args = get_args(tp)
        (inner,) = [a for a in args if a is not type(None)]
        one = _decoder(inner)
        if type(None) not in args:
            return one
        return lambda value: None if value is None else one(value)
    origin, args = get_origin(tp), get_args(tp)
    if origin in (tuple, list):
        return _sequence(_decoder(args[0]), origin)
    if origin is dict:
        return _mapping(_decoder(args[1]))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum(tp)
    if tp is float:
        def number(value: Any) -> float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
            raise _not(value, "a float")
        return number
    if tp in (str, int, bool):
        def simple(value: Any) -> Any:
            if type(value) is tp:
                return value
            raise _not(value, f"a {tp.__name__}")
        return simple
    raise TypeError(f"no stored form for {tp!r}")


def _sequence(item: Decoder, origin: Any) -> Decoder:
    def decode(value: Any) -> Any:
        if not isinstance(value, list):
            raise _not(value, "a list")
        if item is _same:
            items = list(value)
        else:
            items = []
            for i, v in enumerate(value):
                try:
                    items.append(item(v))
                except _Misfit as exc:
                    exc.at.append(f"[{i}]")
                    raise
        return tuple(items) if origin is tuple else items
    return decode


def _mapping(item: Decoder) -> Decoder:
    def decode(value: Any) -> dict[Any, Any]:
        if not isinstance(value, dict):
            raise _not(value, "an object")
        if item is _same:
            return dict(value)
        out = {}
        for k, v in value.items():
            try:
                out[k] = item(v)
            except _Misfit as exc:
                exc.at.append(f".{k}")
                raise
        return out
    return decode


def _enum(tp: type[enum.Enum]) -> Decoder:
    def decode(value: Any) -> Any:
        try:
            return tp(value)
        except ValueError:
            raise _not(value, "one of " + ", ".join(repr(m.value) for m in tp)) from None
    return decode


def _dataclass(cls: type) -> Decoder:
    """A dataclass's decoder; its fields' decoders are made at its first use (a class of
    the model may refer to itself)."""
    plan: list[tuple[str, Decoder, bool]] = []
    known: set[str] = set()

    def decode(value: Any) -> Any:
        if not isinstance(value, dict):
            raise _not(value, f"an object ({cls.__name__})")
        if not known:
            hints = _hints(cls)
            plan.extend((f.name, _decoder(hints[f.name]),
                         f.default is dataclasses.MISSING
                         and f.default_factory is dataclasses.MISSING)
                        for f in _stored_fields(cls))
            known.update({name for name, _, _ in plan} | set(_derived(cls)))
        unknown = value.keys() - known
        if unknown:
            raise _Misfit(f"unknown field(s) {', '.join(sorted(unknown))}")
        kwargs = {}
        for name, decode_field, required in plan:
            if name in value:
                try:
                    kwargs[name] = decode_field(value[name])
                except _Misfit as exc:
                    exc.at.append(f".{name}")
                    raise
            elif required:
                raise _Misfit(f"lacks {name}")
        return cls(**kwargs)
    return decode


# -- the JSON Schema of the stored form -------------------------------------------------------

def json_schema(cls: type, *, schema_id: str, title: str) -> dict[str, Any]:
    defs: dict[str, Any] = {}
    root = _schema(cls, defs)
    return {"$schema": SCHEMA_DIALECT, "$id": schema_id, "title": title, **root,
            "$defs": dict(sorted(defs.items()))}


def _schema(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:  # noqa: PLR0911
    if tp is Any:
        return {}
    if _is_union(tp):
        return {"anyOf": [_schema(a, defs) for a in get_args(tp)]}
    if tp is type(None):
        return {"type": "null"}
    origin, args = get_origin(tp), get_args(tp)
    if origin in (tuple, list):
        return {"type": "array", "items": _schema(args[0], defs)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _schema(args[1], defs)}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if tp.__name__ not in defs:
            defs[tp.__name__] = {}  # placeholder: a class may refer to itself
            defs[tp.__name__] = _object_schema(tp, defs)
        return {"$ref": f"#/$defs/{tp.__name__}"}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [m.value for m in tp]}
    simple = {str: "string", int: "integer", float: "number", bool: "boolean"}
    return {"type": simple[tp]}


def _object_schema(cls: type, defs: dict[str, Any]) -> dict[str, Any]:
    hints = _hints(cls)
    props: dict[str, Any] = {}
    required = []
    for f in _stored_fields(cls):
        props[f.name] = _schema(hints[f.name], defs)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    for name, tp in _derived(cls).items():  # always written
        props[name] = _schema(tp, defs)
        required.append(name)
    out: dict[str, Any] = {"type": "object"}
    doc = (cls.__doc__ or "").strip().split("\n\n")[0]
    if doc and not doc.startswith(f"{cls.__name__}("):  # not dataclass's generated signature
        out["description"] = " ".join(doc.split())
    return {**out, "properties": props, "required": required, "additionalProperties": False}
