"""Typed documents of the runner/worker contract: the base class (to_dict / from_dict with key and
type checks), the protocol version and its error. :mod:`rtmatrix.protocol` re-exports them;
ground-level types that travel inside a document (:mod:`rtmatrix.numerics`) derive from
:class:`Doc` here without importing the documents that carry them."""

from __future__ import annotations

import dataclasses
import types
import typing
from enum import StrEnum
from typing import Any, ClassVar, Self

#: version of the job/result/event documents; both sides must agree exactly
PROTOCOL_VERSION = 7
#: the teacher-forced logits a worker leaves beside its result (float32, positions x vocab)
QUALITY_LOGITS = "quality_logits.npy"


class ProtocolError(ValueError):
    """A document that does not match this rtmatrix's protocol (version, key or type)."""


def _fix(theirs: object) -> str:
    return (
        f"run the worker with the same rtmatrix release as the runner (this one speaks protocol "
        f"{PROTOCOL_VERSION}; the document says {theirs}): reinstall rtmatrix in the worker's "
        "environment from the runner's checkout (pip install -e <checkout>)"
    )


def check_version(data: dict[str, Any], what: str) -> None:
    theirs = data.get("protocol")
    if theirs != PROTOCOL_VERSION:
        msg = (
            f"{what} has protocol version {theirs!r}, this rtmatrix speaks "
            f"{PROTOCOL_VERSION}; fix: {_fix(theirs)}"
        )
        raise ProtocolError(msg)


def _is_optional(tp: object) -> bool:
    args = typing.get_args(tp)
    return type(None) in args and (
        typing.get_origin(tp) in (typing.Union, types.UnionType) or bool(args)
    )


def _check_type(what: str, key: str, value: object, tp: object) -> None:
    """A shallow type check of one field: the top-level JSON shape must match."""
    if value is None:
        if _is_optional(tp):
            return
        msg = f"{what}: key {key!r} is null but required"
        raise ProtocolError(msg)
    origin = typing.get_origin(tp) or tp
    if origin in (typing.Union, types.UnionType):
        options = [typing.get_origin(a) or a for a in typing.get_args(tp) if a is not type(None)]
    else:
        options = [origin]
    py = {
        float: (int, float),
        int: (int,),
        str: (str,),
        bool: (bool,),
        list: (list,),
        dict: (dict,),
    }
    accepted: list[type] = []
    for opt in options:
        if isinstance(opt, type) and issubclass(opt, StrEnum):
            accepted.append(str)
        elif isinstance(opt, type) and opt in py:
            accepted.extend(py[opt])
        else:
            return  # Any, nested dataclass lists etc.: checked by their own from_dict
    if not isinstance(value, tuple(accepted)) or (isinstance(value, bool) and bool not in options):
        msg = f"{what}: key {key!r} has {type(value).__name__} {value!r:.60}, expected {tp}"
        raise ProtocolError(msg)


class _Doc:
    """to_dict/from_dict for a flat dataclass of JSON values (nested docs via ``_nested``)."""

    _nested: ClassVar[dict[str, type[_Doc]]] = {}
    _what: ClassVar[str] = "document"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload, no-any-return]

    @classmethod
    def from_dict(cls, data: object, where: str | None = None) -> Self:
        what = where or cls._what
        if not isinstance(data, dict):
            msg = f"{what}: expected a JSON object, got {type(data).__name__}"
            raise ProtocolError(msg)
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - set(fields))
        if unknown:
            keys = ", ".join(map(repr, unknown))
            msg = f"{what}: unknown key(s) {keys}; {_fix(data.get('protocol'))}"
            raise ProtocolError(msg)
        kwargs: dict[str, Any] = {}
        for name, f in fields.items():
            if name not in data:
                no_default = (
                    f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                )
                if no_default:
                    msg = f"{what}: missing key {name!r}"
                    raise ProtocolError(msg)
                continue
            value = data[name]
            if name in cls._nested and value is not None:
                sub = cls._nested[name]
                if isinstance(value, list):
                    value = [sub.from_dict(v, f"{what}.{name}[{i}]") for i, v in enumerate(value)]
                else:
                    value = sub.from_dict(value, f"{what}.{name}")
            else:
                _check_type(what, name, value, hints[name])
            kwargs[name] = value
        return cls(**kwargs)


#: the base of every typed document (to_dict / from_dict with key and type checks)
Doc = _Doc
