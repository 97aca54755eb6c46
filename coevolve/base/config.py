"""TOML configs as typed dataclasses.

A config file is a set of `[section]` tables; each section maps to a dataclass
whose fields are the allowed keys, with their types and defaults. Loading
checks unknown keys, types and each section's own rules, and reports the first
problem as one line naming the field: `config error: es.sigma must be > 0 (got -1)`.
The same machinery serves the run, compare and agent configs: a new config is
a new dataclass of sections.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import types
import typing
import warnings
from pathlib import Path
from typing import Any, Iterable, TypeVar

from coevolve.base.errors import ConfigError, UsageError

T = TypeVar("T")


def config_error(field: str, problem: str, value: Any = dataclasses.MISSING) -> ConfigError:
    got = "" if value is dataclasses.MISSING else f" (got {value!r})"
    return ConfigError(f"config error: {field} {problem}{got}")


def require(condition: bool, field: str, problem: str, value: Any = dataclasses.MISSING) -> None:
    """Section checks call this: `require(self.sigma > 0, "es.sigma", "must be > 0", self.sigma)`."""
    if not condition:
        raise config_error(field, problem, value)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, field: str) -> Any:
    """Check `value` against the annotation `tp`; ints are accepted for floats."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, field)
            except UsageError:
                pass
        raise config_error(field, f"must be {' or '.join(_type_name(o) for o in options)}", value)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise config_error(field, "must be a list", value)
        (item_type, *_) = typing.get_args(tp) or (Any,)
        items = [_coerce(v, item_type, f"{field}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise config_error(field, "must be a table", value)
        return dict(value)
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise config_error(field, "must be true or false", value)
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise config_error(field, "must be an integer", value)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise config_error(field, "must be a number", value)
        if not math.isfinite(value):
            raise config_error(field, "must be finite", value)
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise config_error(field, "must be a string", value)
        return value
    raise TypeError(f"config field {field}: unsupported annotation {tp!r}")


def build_section(cls: type[T], table: Any, name: str, defaults: Any = None) -> T:
    """One `[name]` table -> a `cls` instance; runs `cls.check(name)` when defined.
    `defaults`: an instance whose values stand in for keys the table leaves out
    (the holding config's own defaults for a shared section); else the class's."""
    if not isinstance(table, dict):
        raise config_error(name, "must be a table", table)
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    for key in table:
        if key not in known:
            raise config_error(f"{name}.{key}", f"is not a known field (known: {', '.join(sorted(known))})")
    values = {key: _coerce(value, hints[key], f"{name}.{key}") for key, value in table.items()}
    if defaults is not None:
        values = {**{f.name: getattr(defaults, f.name) for f in dataclasses.fields(cls)}, **values}
    try:
        section = cls(**values)
    except ValueError as exc:  # a section that validates itself on construction (e.g. Sampling)
        raise UsageError(f"config error: {exc}") from None
    except TypeError as exc:  # a required field is missing
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in values
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if missing:
            raise config_error(f"{name}.{missing[0]}", "is required") from None
        raise config_error(name, str(exc)) from None
    check = getattr(section, "check", None)
    if check is not None:
        try:
            check(name)
        except ValueError as exc:
            raise UsageError(f"config error: {exc}") from None
    return section


def build_config(cls: type[T], raw: dict[str, Any]) -> T:
    """A whole config: each field of `cls` is a section dataclass (or a plain value)."""
    if not isinstance(raw, dict):
        raise config_error("config", "must be a table of sections", raw)
    raw = _renamed_sections(cls, raw)
    # sections a config's methods declare themselves (pydantic models; coevolve/search/methods.py)
    declared = cls.declared_sections(raw) if hasattr(cls, "declared_sections") else {}
    extra = {name: raw.get(name, {}) for name in declared}
    raw = {k: v for k, v in raw.items() if k not in declared}
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in known:
            raise config_error(key, f"is not a known section (known: {', '.join(sorted(known))})")
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in raw:
            continue
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            defaults = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
            values[f.name] = build_section(tp, raw[f.name], f.name, defaults)
        else:
            values[f.name] = _coerce(raw[f.name], tp, f.name)
    config = cls(**values)
    if declared:
        config.method_sections = {name: build_model(model, extra[name], name) for name, model in declared.items()}
    check = getattr(config, "check", None)
    if check is not None:
        check()
    return config


def build_model(model: Any, table: Any, name: str) -> Any:
    """One `[name]` table -> an instance of the pydantic model `model` (a section a method declares);
    the first problem as one config-error line."""
    from pydantic import ValidationError

    if not isinstance(table, dict):
        raise config_error(name, "must be a table", table)
    try:
        return model.model_validate(table)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        field = f"{name}.{where}" if where else name
        if error["type"] == "extra_forbidden":
            raise config_error(field, f"is not a known field (known: {', '.join(model.model_fields)})") from None
        raise config_error(field, error["msg"][:1].lower() + error["msg"][1:], error.get("input")) from None


def _renamed_sections(cls: type, raw: dict[str, Any]) -> dict[str, Any]:
    """Old section names a config class still reads (`RENAMED = {"old": "new"}`),
    with a deprecation message; both names at once is an error."""
    renamed: dict[str, str] = getattr(cls, "RENAMED", {})
    if not any(old in raw for old in renamed):
        return raw
    raw = dict(raw)
    for old, new in renamed.items():
        if old not in raw:
            continue
        if new in raw:
            raise config_error(old, f"is the old name of [{new}]; give only [{new}]")
        warnings.warn(f"config: [{old}] is deprecated, call it [{new}] (read as [{new}] this time)",
                      FutureWarning, stacklevel=3)
        raw[new] = raw.pop(old)
    return raw


def read_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"config file not found: {path}") from None
    except OSError as exc:
        raise UsageError(f"cannot read config file {path}: {exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"config error: {path} is not valid TOML: {exc}") from None


def load_config(cls: type[T], path: str | Path, overrides: dict[str, dict[str, Any]] | None = None) -> T:
    """Read `path`, apply `{section: {key: value}}` overrides (CLI flags), validate."""
    raw = read_toml(path)
    for section, values in (overrides or {}).items():
        table = raw.setdefault(section, {})
        if not isinstance(table, dict):
            raise config_error(section, "must be a table", table)
        table.update(values)
    return build_config(cls, raw)


def as_dict(config: Any) -> dict[str, Any]:
    """A config (or section) as plain dicts and lists (tuples too become lists),
    ready for JSON or TOML and equal to what a JSON round trip gives back."""
    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value

    sections = getattr(config, "method_sections", None) or {}  # declared by methods: after the fixed ones
    return plain({**dataclasses.asdict(config), **{k: v.model_dump() for k, v in sections.items()}})


def _toml_value(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: TOML cannot hold {value}")
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v, where) for v in value) + "]"
    if isinstance(value, dict):  # an inline table, e.g. caps.prices = { "model" = [0.15, 0.6] }
        return "{ " + ", ".join(f"{_toml_value(str(k), where)} = {_toml_value(v, where)}"
                                for k, v in value.items()) + " }"
    raise ValueError(f"{where}: cannot write {type(value).__name__} to TOML")


def dump_toml(data: dict[str, Any]) -> str:
    """Write sections of scalars and lists (what our configs hold) as TOML.
    None values are left out: TOML has no null, and every None field defaults to None."""
    top: list[str] = []
    sections: list[str] = []
    for key, value in data.items():
        if isinstance(value, dict):
            lines = [f"[{key}]"]
            lines += [f"{k} = {_toml_value(v, f'{key}.{k}')}" for k, v in value.items() if v is not None]
            sections.append("\n".join(lines))
        elif value is not None:
            top.append(f"{key} = {_toml_value(value, key)}")
    parts = (["\n".join(top)] if top else []) + sections
    return "\n\n".join(parts) + "\n"


def one_of(value: str, choices: Iterable[str], field: str) -> None:
    choices = list(choices)
    require(value in choices, field, f"must be one of {', '.join(choices)}", value)
