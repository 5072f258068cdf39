"""Readable errors for matrix.yaml: where a key or value does not fit the schema, which one, and what would (an
unknown key gets a "did you mean": a misspelt key silently ignored is how a tuned default goes missing)."""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from ascend_images.matrix.schema import MatrixSpec


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class that owns the last element of `loc`, walking dicts and lists."""
    current: Any = model
    for part in loc[:-1]:
        current = _unwrap_optional(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = _field_by_name(current, part)
            if field is None:
                return None
            current = field.annotation
        elif typing.get_origin(current) in (dict, list):
            current = typing.get_args(current)[-1]
        else:
            return None
    current = _unwrap_optional(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap_optional(annotation: Any) -> Any:
    """`X | None` -> X; anything else unchanged."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def _field_by_name(model: type[BaseModel], name: Any) -> Any:
    for field_name, field in model.model_fields.items():
        if name in (field_name, field.alias):
            return field
    return None


def _valid_keys(model: type[BaseModel]) -> list[str]:
    return [field.alias or name for name, field in model.model_fields.items()]


def format_validation_error(error: ValidationError, root: type[BaseModel] = MatrixSpec) -> list[str]:
    problems = []
    for item in error.errors():
        loc = tuple(item["loc"])
        path = ".".join(str(p) for p in loc) or "(top level)"
        kind = item["type"]
        if kind == "extra_forbidden":
            owner = _model_at(root, loc)
            valid = _valid_keys(owner) if owner else []
            hint = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.6)
            msg = f"{path}: unknown key {loc[-1]!r}"
            if hint:
                msg += f"; did you mean {hint[0]!r}?"
            if valid:
                msg += f" (valid keys: {', '.join(valid)})"
            problems.append(msg)
        elif kind == "missing":
            problems.append(f"{path}: required key is missing")
        else:
            got = item.get("input")
            shown = repr(got) if not isinstance(got, dict | list) else type(got).__name__
            problems.append(f"{path}: {item['msg']} (got {shown})")
    return problems
