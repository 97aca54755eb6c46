"""Operators: the one table of what a request may ask for.

An operator is a registered object: its instruction (the last line of its
prompt, in our own words after EoH's i1, e1, e2, m1, m2, m3), how many
parents it takes, and which methods may use it. The prompts, the config
checks, the methods and the loop read this table; none of them tests an
operator's name. A plugin adds one with `register` (or through the
`coevolve.operators` entry-point group: `name = "pkg.module:OPERATOR"`, an
`Operator` object).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import entry_points

from coevolve.base.config import config_error
from coevolve.base.errors import UsageError, did_you_mean
from tasks.loader import TaskSpecError, _import_attribute

ENTRY_POINT_GROUP = "coevolve.operators"
ANY_METHOD = "*"
ANSWERS = ("program", "blocks")


@dataclass(frozen=True)
class Operator:
    name: str
    instruction: str  # the prompt's task line
    # 0: none (the prompt shows the starting program); None: the method's own parent count (EoH's e1/e2
    # show eoh.parents); n: exactly n
    parents: int | None
    failed_parent: bool = False  # its one parent is a recent failed program (the loop picks it), shown with its error
    fallback: str = ""  # asked instead while it cannot be (a failed-parent operator before anything failed)
    scaled: bool = False  # the paper's offspring multiplier k applies to it (m1, m2)
    methods: tuple[str, ...] = (ANY_METHOD,)  # base methods that may list it; "*": any
    refresh: bool = False  # not a proposal: a Trace2Skill refresh (its requests are analysts)
    in_eoh_lists: bool = True  # may stand in eoh.operators / es.operators (i1 and the refresh do not)
    # what a reply holds: "program", the whole function; "blocks", SEARCH/REPLACE blocks on its one parent
    # (coevolve/search/edits.py), decoded under the parent's own pattern where decoding is constrained
    answer: str = "program"

    def __post_init__(self) -> None:
        if self.answer not in ANSWERS:
            raise UsageError(f"operator {self.name!r}: answer must be one of {', '.join(ANSWERS)}")
        if self.answer == "blocks" and (self.parents != 1 or self.failed_parent):
            raise UsageError(f"operator {self.name!r}: a blocks answer edits exactly one scored parent (parents=1)")

    @property
    def parentless(self) -> bool:
        return self.parents == 0 and not self.failed_parent


_BUILTIN = (
    Operator("i1", "Write a new heuristic for this problem, starting from the template below.", 0,
             in_eoh_lists=False),
    Operator("e1", "Write a new heuristic whose idea is clearly different from every heuristic above.", None),
    Operator("e2", ("Find the idea the heuristics above share, then write a new heuristic that keeps "
                    "that idea but is built differently."), None),
    Operator("m1", "Write an improved variant of the heuristic above; you may change its logic.", 1, scaled=True),
    Operator("m2", "Keep the logic of the heuristic above but change its constants and weights to score better.", 1,
             scaled=True),
    Operator("m3", "Simplify the heuristic above: drop parts that probably do not help, so that it generalises.", 1),
    Operator("diff", "Improve the heuristic above with a few targeted edits; leave the rest of it as it is.", 1,
             answer="blocks"),
    Operator("repair", ("The heuristic above failed with the error shown. Write a fixed version that keeps its idea "
                        "and avoids the error."), 0, failed_parent=True, fallback="m1"),
    Operator("distill", "", 0, refresh=True, methods=(), in_eoh_lists=False),
)

OPERATORS: dict[str, Operator] = {op.name: op for op in _BUILTIN}
_plugins_loaded = False


def register(operator: Operator) -> None:
    if operator.name in OPERATORS:
        raise UsageError(f"operator {operator.name!r} is registered twice")
    OPERATORS[operator.name] = operator


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        module_path, _, attr = entry.value.partition(":")
        try:
            found = _import_attribute(module_path, attr, f"plugin operator {entry.name!r} (entry point {entry.value})")
        except TaskSpecError as exc:
            raise UsageError(str(exc)) from None
        if not isinstance(found, Operator):
            raise UsageError(f"plugin operator {entry.name!r} ({entry.value}) is not a coevolve Operator")
        register(found)


def get(name: str) -> Operator:
    """The operator called `name`; a UsageError listing the known ones otherwise."""
    _load_plugins()
    try:
        return OPERATORS[name]
    except KeyError:
        raise UsageError(f"unknown operator {name!r} (known: {', '.join(proposal_names())})") from None


def answer_of(name: str) -> str:
    """What a reply to operator `name` holds; "program" for a name that is no operator (the seeded template)."""
    _load_plugins()
    op = OPERATORS.get(name)
    return op.answer if op is not None else "program"


def proposal_names() -> list[str]:
    _load_plugins()
    return [n for n, op in OPERATORS.items() if not op.refresh]


def refresh_operator() -> Operator:
    return next(op for op in OPERATORS.values() if op.refresh)


def check_operator(value: str, field: str, method: str = "") -> None:
    """The one check of an operator name in a config list (eoh.operators,
    es.operators): known, listable, and usable by `method` when given."""
    _load_plugins()
    listable = [n for n, op in OPERATORS.items() if op.in_eoh_lists]
    op = OPERATORS.get(value)
    if op is None or not op.in_eoh_lists:
        raise config_error(field, f"must be one of {', '.join(listable)}", value, did_you_mean(value, listable))
    if method and ANY_METHOD not in op.methods and method not in op.methods:
        raise config_error(field, f"operator {value} is not for method {method} (it is for "
                                  f"{', '.join(op.methods) or 'no method'})", value)


def start_operator() -> str:
    """The parentless proposal operator (i1): what a request becomes while the archive has no parent to offer."""
    return next(op.name for op in OPERATORS.values() if op.parentless and not op.refresh)
