"""Finds drafters and verifiers by name through entry points (groups `specdec.drafters` and
`specdec.verifiers`), the one mechanism for built-ins and third-party plugins alike, plus
in-process registration for notebooks and tests. Names resolve lazily; a broken plugin is
reported by name and never hides the others."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from pydantic import BaseModel, ValidationError

from .errors import PluginLoadError, PluginNotFoundError, PluginOptionsError
from .plugins import Drafter, Verifier

GROUPS = {"drafter": ("specdec.drafters", Drafter), "verifier": ("specdec.verifiers", Verifier)}


@dataclass
class PluginInfo:
    kind: str
    name: str
    origin: str  # distribution name and version, or "registered in-process"
    description: str = ""
    error: str | None = None


_registered: dict[str, dict[str, type]] = {"drafter": {}, "verifier": {}}
_loaded: dict[tuple[str, str], type] = {}


def register_drafter(name: str, cls: type[Drafter]) -> type[Drafter]:
    """Register a drafter class under `name` for this process (overrides an entry point)."""
    return _register("drafter", name, cls)


def register_verifier(name: str, cls: type[Verifier]) -> type[Verifier]:
    return _register("verifier", name, cls)


def unregister(kind: str, name: str) -> None:
    _registered[kind].pop(name, None)
    _loaded.pop((kind, name), None)


def _register(kind: str, name: str, cls: type) -> type:
    base = GROUPS[kind][1]
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise PluginLoadError(f"{kind} {name!r}: {cls!r} is not a subclass of specdec.{base.__name__}")
    _registered[kind][name] = cls
    _loaded.pop((kind, name), None)
    return cls


def _entry_points(kind: str) -> dict[str, Any]:
    group = GROUPS[kind][0]
    found: dict[str, Any] = {}
    for point in entry_points(group=group):
        found.setdefault(point.name, point)
    return found


def known_names(kind: str) -> list[str]:
    return sorted(set(_entry_points(kind)) | set(_registered[kind]))


def _origin(point: Any) -> str:
    dist = getattr(point, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else point.value


def load_class(kind: str, name: str) -> type:
    """Resolve a plugin class by name, importing its module on first use."""
    if name in _registered[kind]:
        return _registered[kind][name]
    if (kind, name) in _loaded:
        return _loaded[(kind, name)]
    points = _entry_points(kind)
    if name not in points:
        known = known_names(kind)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise PluginNotFoundError(f"unknown {kind} {name!r}. Known {kind}s: {', '.join(known) or 'none'}.{hint}")
    point = points[name]
    base = GROUPS[kind][1]
    try:
        cls = point.load()
    except Exception as error:
        raise PluginLoadError(f"{kind} {name!r} ({point.value}, from {_origin(point)}) failed to import: "
                              f"{error!r}") from error
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise PluginLoadError(f"{kind} {name!r} ({point.value}) is {cls!r}, not a specdec.{base.__name__} subclass")
    _loaded[(kind, name)] = cls
    return cls


def validate_options(kind: str, name: str, cls: type, options: dict | BaseModel | None) -> BaseModel:
    if isinstance(options, cls.Options):
        return options
    try:
        return cls.Options.model_validate(options or {})
    except ValidationError as error:
        raise PluginOptionsError(f"invalid options for {kind} {name!r}:\n{error}") from error


def create(kind: str, name: str, options: dict | BaseModel | None = None):
    """Instantiate a registered plugin with validated options."""
    cls = load_class(kind, name)
    return cls(validate_options(kind, name, cls, options))


def list_plugins() -> list[PluginInfo]:
    """Every drafter and verifier with origin and description; broken ones carry their error."""
    infos: list[PluginInfo] = []
    for kind in GROUPS:
        points = _entry_points(kind)
        for name in known_names(kind):
            if name in _registered[kind]:
                cls = _registered[kind][name]
                infos.append(PluginInfo(kind, name, "registered in-process", cls.description))
                continue
            try:
                cls = load_class(kind, name)
                infos.append(PluginInfo(kind, name, _origin(points[name]), cls.description))
            except PluginLoadError as error:
                infos.append(PluginInfo(kind, name, _origin(points[name]), error=str(error)))
    return infos
