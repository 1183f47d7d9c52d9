"""A sweep YAML composed from its ``include`` chain, and which file each value came from.

:func:`compose` reads a sweep YAML and the file it includes (and so on, at most :data:`MAX_INCLUDE_DEPTH` files),
merging the including file's values over the included ones. Beside the merged values it keeps
:class:`Origins`: for every key path a file set, that file, so that a bad value is blamed on the file that
holds it (an included file's typo is reported in that file, not in the file the user ran). Every way the
composition itself can fail (a missing or looping include, a name that is not a name) is one ConfigError
that names the file and the key path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from ..config import load_yaml
from ..errors import ConfigError

MAX_INCLUDE_DEPTH = 8

Loc = tuple[Any, ...]  # a key path: mapping keys and list indices, as pydantic's error locations give them


class Origins:
    """Which file set each key path of a composed config (the longest recorded prefix of a path decides)."""

    def __init__(self, root: str):
        self._by_path: dict[Loc, str] = {(): root}

    def of(self, loc: Loc) -> str:
        """The file that set the value at ``loc`` (or the nearest enclosing value it set)."""
        loc = tuple(loc)
        for n in range(len(loc), -1, -1):
            if loc[:n] in self._by_path:
                return self._by_path[loc[:n]]
        return self._by_path[()]

    def set(self, loc: Loc, source: str) -> None:
        """``source`` set the whole value at ``loc``: what was recorded beneath it no longer holds."""
        n = len(loc)
        for k in [k for k in self._by_path if len(k) > n and k[:n] == loc]:
            del self._by_path[k]
        self._by_path[tuple(loc)] = source

    def pin(self, loc: Loc) -> None:
        """Record ``loc``'s current file explicitly, before a file above it takes over the enclosing value."""
        self._by_path.setdefault(tuple(loc), self.of(loc))

    @property
    def root(self) -> str:
        return self._by_path[()]

    @root.setter
    def root(self, source: str) -> None:
        self._by_path[()] = source


def key_path(loc: Loc) -> str:
    """``('chains', 0, 'name')`` → ``chains.0.name`` (the form the validation messages use)."""
    return ".".join(str(p) for p in loc) or "(top level)"


def compose(path: Path, seen: tuple[Path, ...] = ()) -> tuple[dict[str, Any], Origins]:
    """A sweep YAML's values with its ``include: OTHER.yaml`` (relative to the including file) merged
    under them: mappings merge key by key (the including file wins), other values are replaced, and
    ``chains`` merge by name: an entry naming an included chain appends its ``models`` to that chain
    (it holds ``name`` and ``models`` only), any other entry is a new chain. So a config can extend
    another (configs/paper_extended.yaml adds models beside configs/paper.yaml's chains) without copying it."""
    values = load_yaml(path)
    include = values.pop("include", None)
    if include is None:
        return values, Origins(str(path))
    target = _include_target(path, include)
    chain = (*seen, _resolved(path, path, "the file itself"))
    if target in chain:
        cycle = " → ".join(str(p) for p in (*chain, target))
        raise ConfigError(f"{path}: include: {include} makes an include cycle ({cycle}); remove one of the includes")
    if len(chain) > MAX_INCLUDE_DEPTH:
        raise ConfigError(f"{path}: include: includes nest deeper than {MAX_INCLUDE_DEPTH} files; include fewer levels")
    try:
        base, origins = compose(target, chain)
    except ConfigError as e:
        raise ConfigError(f"{e}\n  (included by {path}: include: {include})") from None
    merged = _merge(base, values, str(path), origins, ())  # pins the included file's keys first
    origins.root = str(path)  # what no file set (a missing key) is the including file's to add
    return merged, origins


def _include_target(path: Path, include: Any) -> Path:
    if not isinstance(include, str) or not include.strip():
        raise ConfigError(
            f"{path}: include must be the path of one sweep YAML (relative to {path.parent}), got {str(include)[:200]}"
        )
    return _resolved(path, path.parent / include, f"include: {include}")


def _resolved(path: Path, target: Path, what: str) -> Path:
    """``target`` with its links followed; a loop of links is a config error of ``path``, not a traceback."""
    try:
        return target.resolve()
    except (RuntimeError, OSError) as e:  # RuntimeError: a symlink loop (Python < 3.13)
        raise ConfigError(f"{path}: {what}: {target} cannot be followed ({e}); point it at a regular file") from None


def _merge(base: dict[str, Any], top: dict[str, Any], source: str, origins: Origins, at: Loc) -> dict[str, Any]:
    out = dict(base)
    for key in base:
        origins.pin((*at, key))
    for key, val in top.items():
        here = (*at, key)
        if here == ("chains",) and isinstance(base.get(key), list) and isinstance(val, list):
            out[key] = _merge_chains(base[key], val, source, origins)
        elif isinstance(base.get(key), dict) and isinstance(val, dict):
            out[key] = _merge(base[key], val, source, origins, here)
        else:
            out[key] = val
            origins.set(here, source)
    return out


def _name(entry: Any) -> Optional[str]:
    """A chain entry's name if it is one (a list or a mapping there is left to the validation, which names it)."""
    name = entry.get("name") if isinstance(entry, dict) else None
    return name if isinstance(name, str) else None


def _merge_chains(base: list[Any], top: list[Any], source: str, origins: Origins) -> list[Any]:
    chains = [dict(c) if isinstance(c, dict) else c for c in base]
    by_name = {name: i for i, c in enumerate(chains) if (name := _name(c)) is not None}
    for i in range(len(chains)):
        origins.pin(("chains", i))
    for j, entry in enumerate(top):
        name = _name(entry)
        if name is None or name not in by_name:
            origins.set(("chains", len(chains)), source)
            chains.append(entry)  # a new chain (validated with the rest)
            continue
        extra = sorted(set(entry) - {"name", "models"}, key=str)
        if extra:
            raise ConfigError(
                f"{source}: chains.{j}: chain '{name}' is in the included config; an entry that extends it holds "
                f"name and models only (got {', '.join(map(str, extra))}): change the included "
                "config, or give this chain another name"
            )
        models = entry.get("models") or []
        if not isinstance(models, list):
            raise ConfigError(f"{source}: chains.{j}.models: chain '{name}': models must be a list of models")
        i = by_name[name]
        have = chains[i].get("models") or []
        have = have if isinstance(have, list) else [have]
        for k in range(len(have), len(have) + len(models)):
            origins.set(("chains", i, "models", k), source)
        chains[i]["models"] = [*have, *models]
    return chains
