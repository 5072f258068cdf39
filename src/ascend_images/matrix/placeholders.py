"""Values `invoke outdated --write` could not read here, left in matrix.yaml as marked placeholders: loading the
matrix refuses every one, naming where it is and what to fill it with, so a draft is never built half-read."""

from __future__ import annotations

from typing import Any

MARK = "<FILL: "


def placeholder(what: str) -> str:
    return f"{MARK}{what}>"


def is_placeholder(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(MARK)


def placeholders(raw: Any, where: str = "") -> list[str]:
    """Every placeholder in the document, as `key.path: what to fill it with`."""
    if isinstance(raw, dict):
        return [p for k, v in raw.items() for p in placeholders(v, f"{where}.{k}" if where else str(k))]
    if isinstance(raw, list):
        return [p for i, v in enumerate(raw) for p in placeholders(v, f"{where}[{i}]")]
    if is_placeholder(raw):
        return [f"{where}: a placeholder `invoke outdated --write` left: fill it with {raw[len(MARK):-1]} (and say "
                "where it was read)"]
    return []
