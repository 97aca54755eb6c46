"""TOML configs as pydantic models.

A config file is a set of `[section]` tables; each section is a `Section`
(a pydantic model) whose fields declare the allowed keys with their types,
bounds and choices, and a whole config is a `Config` of sections. Unknown keys
are refused, nothing is coerced (an int is accepted for a float), and the
first problem becomes one line naming the TOML key, the value and what was
expected, through `error_line`: `config error: es.sigma must be > 0 (got -1.0)`.
Rules across fields are validators that raise `config_error` themselves.
Validation reads no files and builds nothing; the run kinds build their task
after it (coevolve.commands.run, coevolve.plan.compare_config).
"""

from __future__ import annotations

import math
import re
import tomllib
import typing
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Iterator, Sequence, TypeVar

import annotated_types as at
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, model_validator

from coevolve.base.errors import ConfigError, UsageError, did_you_mean

T = TypeVar("T")
_MISSING = object()
STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)  # an int passes for a float, nothing else
TYPES = {"int_type": "must be an integer", "float_type": "must be a number", "bool_type": "must be true or false",
         "string_type": "must be a string", "list_type": "must be a list", "tuple_type": "must be a list",
         "dict_type": "must be a table", "model_type": "must be a table", "dataclass_type": "must be a table",
         "finite_number": "must be finite", "missing": "is required", "string_too_short": "must not be empty"}
UNKNOWN = ("extra_forbidden", "unexpected_keyword_argument")
BOUNDS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")


class RenamedSection(FutureWarning):
    """A section read under its old name ([proposer], [teacher]): shown as one `warning:` line."""


_format_warning = warnings.formatwarning


def _one_line(message: Any, category: type, filename: str, lineno: int, line: str | None = None) -> str:
    if issubclass(category, RenamedSection):  # the user's config, not a place in our code (or pydantic's)
        return f"warning: {message}\n"
    return _format_warning(message, category, filename, lineno, line)


warnings.formatwarning = _one_line


HEAD = "config error: "
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")  # a dotted TOML key, up to a list index or the problem


def config_error(field: str, problem: str, value: Any = _MISSING, hint: str = "") -> ConfigError:
    return ConfigError(f"{HEAD}{field} {problem}{'' if value is _MISSING else f' (got {value!r})'}{hint}")


def error_key(message: str) -> tuple[str, str] | None:
    """The key a config error's line names and the rest of the line, so a holder can name it where
    its user wrote it (`keys_under`, coevolve.plan's comparison keys): `config error: es.sigma must be
    > 0` gives ("es.sigma", " must be > 0"); None for any other line."""
    match = _KEY.match(message, len(HEAD)) if message.startswith(HEAD) else None
    return (match.group(), message[match.end():]) if match else None


def require(condition: bool, field: str, problem: str, value: Any = _MISSING) -> None:
    """Validators across fields call this: `require(a < b, "reward.a", "must be < reward.b", a)`."""
    if not condition:
        raise config_error(field, problem, value)


def _bounds(info: Any) -> str:
    """A field's bounds as people write them: `> 0`, `in 1..512`, `in (0, 1]`."""
    low = next((m for m in info.metadata if isinstance(m, (at.Gt, at.Ge))), None)
    high = next((m for m in info.metadata if isinstance(m, (at.Lt, at.Le))), None)
    lo = low and (f"> {low.gt}" if isinstance(low, at.Gt) else f">= {low.ge}")
    hi = high and (f"< {high.lt}" if isinstance(high, at.Lt) else f"<= {high.le}")
    if not (low and high):
        return f"must be {lo or hi}"
    a, b = lo.split()[1], hi.split()[1]
    if info.annotation is int:
        return f"must be in {a}..{b}"
    return f"must be in {'(' if lo[1] == ' ' else '['}{a}, {b}{']' if hi[1] == '=' else ')'}"


def unknown_key(field: str, known: list[str], elsewhere: Sequence[str] = ()) -> ConfigError:
    """`section.key is not a known field (known: ...)`, ending with the sections that take the key
    (`elsewhere`, found by `sections_with`) when there are some, else with the near name among `known`:
    `[es] temperature` is a key written under the wrong section, not a misspelt `operators`."""
    hint = did_you_mean(field.rpartition(".")[2], known)
    if elsewhere:
        before = ", ".join(f"[{name}]" for name in elsewhere[:-1])
        hint = f"; it is a key of {before + ' and ' if before else ''}[{elsewhere[-1]}]"
    return config_error(field, f"is not a known field (known: {', '.join(known)})", hint=hint)


def section_keys(annotation: Any) -> set[str]:
    """The keys a section's table takes, from its field's annotation: a union's members' together
    ([es], whose noise modes differ by `rank`); none for a field that is no model (a task's options)."""
    fields = getattr(annotation, "__pydantic_fields__", None)
    if fields is not None:
        return set(fields)
    return set().union(*(section_keys(arg) for arg in typing.get_args(annotation)))


def sections_with(config: type, key: str, but: str = "") -> list[str]:
    """The sections of `config` (a Config class) other than `but` whose tables take `key`."""
    return sorted(name for name, info in config.model_fields.items()
                  if name != but and not info.exclude and key in section_keys(info.annotation))


def _misplaced(config: type, raw: dict[str, Any]) -> None:
    """A key of another section written under this one (`[es] temperature`, `[eoh] batch`) refused as
    that, before the section's own check would offer the near name among its own keys."""
    for name, table in raw.items():
        section = config.RENAMED.get(name, name)  # an old name ([proposer]) is named as written
        own = section_keys(config.model_fields[section].annotation)
        if not (own and isinstance(table, dict)):  # a task's options are the task's to check
            continue
        for key in table:
            elsewhere = [] if key in own else sections_with(config, key, but=section)
            if elsewhere:
                raise unknown_key(f"{name}.{key}", sorted(own), elsewhere)


def error_line(exc: ValidationError, model: type, prefix: str = "") -> ConfigError:
    """pydantic's first error as one line: the dotted TOML key, what it must be, the value."""
    # an unknown key first, as a misspelt key often explains the rest
    error = min(exc.errors(include_url=False), key=lambda e: e["type"] not in UNKNOWN)
    where, info, owner, parent = [prefix] if prefix else [], None, model, model
    for part in error["loc"]:
        if isinstance(part, int):  # a list item
            where[-1] += f"[{part}]"
            continue
        where.append(str(part))
        parent, info = owner, getattr(owner, "__pydantic_fields__", {}).get(part)
        owner = getattr(info, "annotation", None)
    kind, value, field, hint = error["type"], error["input"], ".".join(where) or "config", ""
    if kind in UNKNOWN:
        return unknown_key(field, sorted(parent.__pydantic_fields__))
    if kind == "value_error":
        problem = str(error["ctx"]["error"])
    elif kind == "literal_error":
        choices = typing.get_args(info.annotation)
        named = all(isinstance(c, str) for c in choices)
        problem = f"must be one of {', '.join(choices)}" if named else f"must be {' or '.join(map(str, choices))}"
        hint = did_you_mean(value, choices) if named else ""
    elif kind in BOUNDS:
        problem = _bounds(info)
        value = float(value) if info.annotation is float else value
    elif kind == "string_pattern_mismatch":  # the field's description says what the pattern allows
        problem = f"must be {info.description}"
    elif kind == "union_tag_invalid":  # a mode key naming no member (es.noise); the discriminator is named after it
        key = error["ctx"]["discriminator"].strip("_()")
        field, value = f"{field}.{key}", value.get(key) if isinstance(value, dict) else value
        tags = [tag.strip(" '") for tag in error["ctx"]["expected_tags"].split(",")]
        problem, hint = f"must be one of {', '.join(tags)}", did_you_mean(value, tags)
    elif kind == "too_short":
        problem = "must list at least one value"
    elif kind == "too_long":  # a list (pydantic says "... after validation, not 4")
        problem = f"must list at most {error['ctx']['max_length']} values"
    elif kind == "string_too_long":
        problem = f"must be at most {error['ctx']['max_length']} characters"
    else:
        problem = TYPES.get(kind, error["msg"].lower().replace("input should", "must"))
    if kind in BOUNDS + ("literal_error",) and info.description:
        problem += f" ({info.description})"
    return config_error(field, problem, _MISSING if kind == "missing" else value, hint)


class Section(BaseModel):
    """One `[section]`, named `NAME` in TOML (default: the class name less
    "Section", lower case). pydantic calls this __init__ for nested sections
    too, so the error line is made here, under that name."""

    model_config = STRICT
    NAME: ClassVar[str] = ""

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            cls = type(self)
            name = "" if issubclass(cls, Config) else cls.NAME or cls.__name__.removesuffix("Section").lower()
            raise error_line(exc, cls, name) from None


class Config(Section):
    """A whole config: its fields are sections. A section the holder declares with
    its own default instance (e.g. shorter replies for agent turns) takes the keys
    a table leaves out from that instance. `RENAMED = {"old": "new"}`: old section
    names still read, with a deprecation message."""

    RENAMED: ClassVar[dict[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _tables(cls, raw: Any) -> Any:
        if not isinstance(raw, dict):
            return raw
        raw = dict(raw)
        known = sorted(k for k, f in cls.model_fields.items() if not f.exclude)
        for key in raw:  # before any section's own errors, as a misspelt section often explains them
            if key not in cls.model_fields and key not in cls.RENAMED:
                raise config_error(key, f"is not a known section (known: {', '.join(known)})",
                                   hint=did_you_mean(key, known))
        _misplaced(cls, raw)
        for old, new in cls.RENAMED.items():
            if old in raw:
                require(new not in raw, old, f"is the old name of [{new}]; give only [{new}]")
                section = cls.model_fields[new].annotation
                if isinstance(raw[old], dict) and isinstance(section, type) and issubclass(section, Section):
                    try:  # its own errors named where the user wrote them: proposer.concurency
                        section(**raw[old])
                    except ConfigError as exc:
                        head = f"config error: {new}."
                        message = str(exc)
                        raise ConfigError(message.replace(f"{new}.", f"{old}.")
                                          if message.startswith(head) else message) from None
                warnings.warn(f"config: [{old}] is deprecated, call it [{new}] (read as [{new}] this time)",
                              RenamedSection, stacklevel=1)  # shown once, as one line (_one_line)
                raw[new] = raw.pop(old)
        for name, info in cls.model_fields.items():
            default = info.get_default(call_default_factory=True)
            if isinstance(raw.get(name), dict) and hasattr(default, "__pydantic_fields__"):
                raw[name] = {**{k: getattr(default, k) for k in type(default).__pydantic_fields__}, **raw[name]}
        return raw


def build_config(cls: type[T], raw: Any, prefix: str = "") -> T:
    """A config (or, with its TOML name as `prefix`, one section, e.g. one a
    method declares itself: coevolve/search/methods.py) from its tables."""
    if not isinstance(raw, dict):
        raise config_error(prefix or "config", "must be a table" if prefix else "must be a table of sections", raw)
    try:
        return TypeAdapter(cls).validate_python(raw)
    except ValidationError as exc:
        raise error_line(exc, cls, prefix) from None


@contextmanager
def keys_under(prefix: str) -> Iterator[None]:
    """Config errors raised inside name their key under `prefix`: a config held as a table of
    another (a comparison's named arm) is reported where the user wrote it."""
    try:
        yield
    except ConfigError as exc:
        named = error_key(str(exc))
        if named is None:
            raise
        key, rest = named
        raise ConfigError(f"{HEAD}{prefix}.{key}{rest}") from None


def not_utf8(exc: UnicodeDecodeError) -> str:
    """Where a file stops being UTF-8, as people read it: `byte 0xe9 at position 5`."""
    return f"byte {exc.object[exc.start]:#04x} at position {exc.start}"


def read_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        # utf-8-sig: a byte-order mark (some Windows editors save one) is no setting; TOML's parser took it
        # for a statement ("Invalid statement (at line 1, column 1)")
        return tomllib.loads(path.read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise UsageError(f"config file not found: {path}") from None
    except UnicodeDecodeError as exc:  # a ValueError, not an OSError: a Latin-1 comment, a binary file
        raise UsageError(f"config error: {path} is not UTF-8 text ({not_utf8(exc)}); TOML files must be UTF-8") \
            from None
    except OSError as exc:
        raise UsageError(f"cannot read config file {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"config error: {path} is not valid TOML: {exc}") from None


def require_settings(raw: dict[str, Any], path: str | Path, example: str) -> None:
    """An empty config file (nothing but comments, or 0 bytes) is refused rather than run on every default:
    it is a file saved in the wrong place or never written, and the defaults would start hours of work."""
    if not raw:
        raise UsageError(f"config error: {path} holds no settings (empty, or only comments): start from "
                         f"{example}")


def merge_overrides(raw: dict[str, Any], overrides: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
    """`{section: {key: value}}` (CLI flags) laid over a config's tables, in place."""
    for section, values in (overrides or {}).items():
        table = raw.setdefault(section, {})
        require(isinstance(table, dict), section, "must be a table", table)
        table.update(values)
    return raw


def load_config(cls: type[T], path: str | Path, overrides: dict[str, dict[str, Any]] | None = None) -> T:
    return build_config(cls, merge_overrides(read_toml(path), overrides))


def as_dict(config: Any) -> dict[str, Any]:
    """A config (or section) as plain dicts and lists (tuples too become lists),
    ready for JSON or TOML and equal to what a JSON round trip gives back. The
    sections a run's method declares itself (`method_sections`) follow the fixed ones."""
    data = config.model_dump(mode="json")
    for name, section in (getattr(config, "method_sections", None) or {}).items():
        data[name] = section.model_dump(mode="json")
    return data


def _toml_value(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"{where}: TOML cannot hold {value}")
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v, where) for v in value) + "]"
    if isinstance(value, dict):  # an inline table, e.g. caps.prices = { "model" = [0.15, 0.6] }
        return "{ " + ", ".join(f"{_toml_value(str(k), where)} = {_toml_value(v, where)}"
                                for k, v in value.items()) + " }"
    raise ValueError(f"{where}: cannot write {type(value).__name__} to TOML")


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _toml_key(key: str) -> str:
    """A key as TOML reads it back: bare where it may be, else quoted (a file task's spec,
    `[task."/path/env.py:Game"]`, holds / . and :)."""
    return key if _BARE_KEY.fullmatch(key) else _toml_value(key, key)


def dump_toml(data: dict[str, Any]) -> str:
    """Sections of scalars and lists (what our configs hold) as TOML. None values
    are left out: TOML has no null, and every None field defaults to None."""
    top = [f"{_toml_key(k)} = {_toml_value(v, k)}" for k, v in data.items() if not isinstance(v, dict) and v is not None]
    sections = ["\n".join([f"[{_toml_key(key)}]"] + [f"{_toml_key(k)} = {_toml_value(v, f'{key}.{k}')}"
                                                     for k, v in table.items() if v is not None])
                for key, table in data.items() if isinstance(table, dict)]
    return "\n\n".join((["\n".join(top)] if top else []) + sections) + "\n"
