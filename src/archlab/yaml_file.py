"""Reading a YAML file a user wrote (a run config for `--config`, an ablation suite): its tree, or
one line naming the file and what is wrong with it.

    a folder          "config file configs is a folder, not a YAML file (it holds a.yaml, ...)"
    a missing path    "config file x.yaml does not exist"
    not UTF-8         "... is not UTF-8 text (byte 12: 0xff); save it as UTF-8"
    a syntax error    "... is not valid YAML (line 3, column 5): mapping values are not allowed ..."
    a key given twice "... gives key 'arms.rmsnorm' twice (lines 12 and 14); ..."

PyYAML keeps the last of two equal keys without a word (YAML 1.2 calls such a file invalid), so two
arms of one name would silently be one; `read_yaml` reads the node tree first and refuses them
(`DuplicateKey`, which says where). Torch-free.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from archlab.nn.config import ConfigError

# `<<: *base` merges a mapping in: its keys may repeat those of the mapping, by design
MERGE_TAG = "tag:yaml.org,2002:merge"
SHOWN_FILES = 3  # a folder given for a file: this many of its YAML files are named


class DuplicateKey(ConfigError):
    """A mapping of a YAML file gives one key twice; `path` is the mapping's keys from the top."""

    def __init__(
        self, message: str, path: tuple[str, ...], key: str, lines: tuple[int, int]
    ) -> None:
        super().__init__(message)
        self.path, self.key, self.lines = path, key, lines


def read_yaml(path: str | Path, what: str = "config file") -> object:
    """The tree of the YAML file `path` (None when it is empty); `what` names it in the one-line
    errors (FileNotFoundError for a missing path, ConfigError for the rest, module doc)."""
    path = Path(path)
    if path.is_dir():
        found = sorted(p.name for p in [*path.glob("*.yaml"), *path.glob("*.yml")])
        more = ", ..." if found[SHOWN_FILES:] else ""
        holds = f" (it holds {', '.join(found[:SHOWN_FILES])}{more})" if found else ""
        raise ConfigError(f"{what} {path} is a folder, not a YAML file{holds}")
    if not path.exists():
        raise FileNotFoundError(f"{what} {path} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{what} {path} is not UTF-8 text (byte {err.start}: {err.object[err.start]:#04x}); "
            "save it as UTF-8"
        ) from None
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        duplicate = _duplicate(node, ())
        if duplicate is not None:
            keys, key, lines = duplicate
            dotted = ".".join((*keys, key))
            raise DuplicateKey(
                f"{what} {path} gives key {dotted!r} twice (lines {lines[0]} and {lines[1]}); YAML "
                "keeps only the last: give each key once",
                keys,
                key,
                lines,
            )
        return loader.construct_document(node)
    except yaml.YAMLError as err:
        raise ConfigError(f"{what} {path} is not valid YAML{_where(err)}") from None
    finally:
        loader.dispose()


def _where(err: yaml.YAMLError) -> str:
    """Where PyYAML saw the problem and what it was, and the construct it was reading when that one
    began elsewhere (an unclosed `{` is noticed lines later): " (line 5, column 7): expected ',' or
    '}', but got ':' (while parsing a flow mapping that starts at line 4, column 6)"."""
    mark, context = getattr(err, "problem_mark", None), getattr(err, "context_mark", None)
    text = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    text += f": {getattr(err, 'problem', None) or err}"
    if (
        context is not None
        and getattr(err, "context", None)
        and (mark is None or context.line != mark.line)
    ):
        start = f"line {context.line + 1}, column {context.column + 1}"
        text += f" ({err.context} that starts at {start})"
    return text


def _duplicate(
    node: yaml.Node, keys: tuple[str, ...], seen: set[int] | None = None
) -> tuple[tuple[str, ...], str, tuple[int, int]] | None:
    """The first key a mapping under `node` gives twice: the keys above it, the key and its two
    lines (1-based); None when every key is given once."""
    seen = set() if seen is None else seen
    if id(node) in seen:  # an alias of a node already walked (YAML may even nest one in itself)
        return None
    seen.add(id(node))
    children: list[tuple[tuple[str, ...], yaml.Node]] = []
    if isinstance(node, yaml.MappingNode):
        first: dict[tuple[str, str], int] = {}
        for key_node, value in node.value:
            if key_node.tag == MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                children.append((keys, value))
                continue
            ident, line = (key_node.tag, key_node.value), key_node.start_mark.line + 1
            if ident in first:
                return keys, key_node.value, (first[ident], line)
            first[ident] = line
            children.append(((*keys, key_node.value), value))
    elif isinstance(node, yaml.SequenceNode):
        children = [((*keys, str(i)), item) for i, item in enumerate(node.value)]
    for child_keys, child in children:
        found = _duplicate(child, child_keys, seen)
        if found is not None:
            return found
    return None
