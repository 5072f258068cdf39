"""The project's YAML files (matrix.yaml, pins.yaml, the upstream transcriptions), read strictly: UTF-8 text, and a
key given twice in one mapping is refused where it stands, not silently replaced by the second (what PyYAML does)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class YamlFileError(ValueError):
    """The file cannot be read as the YAML it should be: the message names the file (and the line and column)."""


class _StrictLoader(yaml.SafeLoader):
    pass


# libyaml's parser when PyYAML has it (its wheels do): the same documents, ten times faster (5 ms against 50 for
# matrix.yaml, read by every command); a document it refuses is read again by the Python parser, whose messages
# say more ("but got '<stream end>'")
class _FastStrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    pass


def _mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    loader.flatten_mapping(node)  # merge keys (<<) may be overridden, as YAML says; written keys may not
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            first = seen[key].start_mark
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is given twice in this mapping (first at line {first.line + 1}, column "
                            f"{first.column + 1}); the second would silently replace the first",
                key_node.start_mark)
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
_FastStrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_yaml_text(text: str, name: str) -> Any:
    try:
        return yaml.load(text, Loader=_FastStrictLoader)
    except yaml.YAMLError:
        pass
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        # yaml's own text names "<unicode string>"; the mark's line and column (0-based) name the place in the file
        mark = getattr(exc, "problem_mark", None)
        where = f"{name}:{mark.line + 1}:{mark.column + 1}: " if mark else f"{name}: "
        problem = " ".join(filter(None, [getattr(exc, "context", None), getattr(exc, "problem", None)]))
        if not problem and isinstance(exc, yaml.reader.ReaderError):  # a character YAML refuses: no mark, an offset
            problem = f"{exc.reason} (character #x{exc.character:04x} at offset {exc.position})"
        # one line, whatever yaml says (its own text spans lines and names "<unicode string>")
        raise YamlFileError(f"{where}not valid YAML: {' '.join((problem or str(exc)).split())}") from None


def load_yaml_file(path: Path) -> Any:
    """The document of a YAML file; YamlFileError (one line) when it is not UTF-8 text or not valid YAML.
    FileNotFoundError is the caller's to word (it knows which flag named the file)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlFileError(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
                            "save it as UTF-8") from None
    return load_yaml_text(text, str(path))
