"""ReAct math as a multi-turn agent task.

Each turn the agent either calls a Python tool (a ```python fenced block, run
in the same sandbox as heuristic candidates, handed in by the agent run) or answers with \\boxed{...}.
Reward is exact match of the boxed answer (numbers compared as fractions).
Problems are generated from seeds (arithmetic and small algebra word
problems with integer answers) or read from a user JSONL file of
{"question": ..., "answer": ..., "split"?: "train"|"eval"} lines (a line
without a split is held out when its question hashes so, one in five).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from coevolve.base.sampling import PAPER_EVAL
from tasks.base import PythonTool
from tasks.registry import TaskOptionError

SPLITS = ("train", "eval")

OUTPUT_LIMIT = 1500  # characters of tool output shown to the agent


@dataclass(frozen=True)
class MathCase:
    id: str
    question: str
    answer: str


@dataclass
class MathState:
    case: MathCase
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    no_action: int = 0
    answer: str | None = None
    done: bool = False


# ---------------------------------------------------------------- problems


def _arithmetic(rng: random.Random) -> tuple[str, int]:
    a, b, c = rng.randint(12, 99), rng.randint(3, 29), rng.randint(10, 500)
    return f"What is {a} * {b} + {c}?", a * b + c


def _linear(rng: random.Random) -> tuple[str, int]:
    x, a, b = rng.randint(-20, 30), rng.randint(2, 12), rng.randint(-50, 50)
    sign = "+" if b >= 0 else "-"
    return f"Solve for x: {a}x {sign} {abs(b)} = {a * x + b}. What is x?", x


def _change(rng: random.Random) -> tuple[str, int]:
    price, count = rng.randint(2, 15), rng.randint(2, 9)
    paid = (price * count // 10 + 1 + rng.randint(0, 5)) * 10
    question = (
        f"A pencil costs {price} dollars. Sam buys {count} pencils and pays with {paid} dollars. "
        "How many dollars of change does he get?"
    )
    return question, paid - price * count


def _distance(rng: random.Random) -> tuple[str, int]:
    speed, hours, extra = rng.randint(30, 120), rng.randint(2, 9), rng.randint(5, 60)
    question = (
        f"A train travels at {speed} km per hour for {hours} hours, then {extra} km more. "
        "How many km does it travel in total?"
    )
    return question, speed * hours + extra


def _percent(rng: random.Random) -> tuple[str, int]:
    percent = rng.choice([5, 10, 15, 20, 25, 30, 40, 50, 60, 75])
    base = rng.randint(2, 40) * 20
    return f"What is {percent}% of {base}?", percent * base // 100


def _sum_difference(rng: random.Random) -> tuple[str, int]:
    small, gap = rng.randint(5, 80), rng.randint(1, 40)
    big = small + gap
    question = f"Two numbers add up to {small + big} and their difference is {gap}. What is the larger number?"
    return question, big


GENERATORS = (_arithmetic, _linear, _change, _distance, _percent, _sum_difference)


def _case_seed(split: str, seed: int, index: int) -> int:
    digest = hashlib.blake2b(f"react_math/{split}/{seed}/{index}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "little")


def load_problems(path: str | Path) -> list[dict]:
    """Read a JSONL problem file; each line needs "question" and "answer"."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such problems file")
    records = []
    seen_ids: dict[str, int] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{number}: expected a JSON object")
        for key in ("question", "answer"):
            if key not in record or not str(record[key]).strip():
                raise ValueError(f"{path}:{number}: missing field {key!r}")
        split = record.get("split")
        if split is not None and split not in SPLITS:
            raise ValueError(f"{path}:{number}: field 'split' must be one of {SPLITS}, got {split!r}")
        record_id = str(record.get("id", f"line{number}"))
        if record_id in seen_ids:
            raise ValueError(f"{path}:{number}: duplicate id {record_id!r} (first on line {seen_ids[record_id]})")
        seen_ids[record_id] = number
        records.append(
            {"id": record_id, "question": str(record["question"]),
             "answer": str(record["answer"]), "split": split}
        )
    if not records:
        raise ValueError(f"{path}: no problems")
    # Held-out problems must be unseen in training: lines without a split are
    # assigned by content (one in five held out), and a question given to
    # both splits is refused.
    first: dict[str, tuple[str, int]] = {}
    for number, record in enumerate(records, start=1):
        key = " ".join(record["question"].lower().split())
        if record["split"] is None:
            digest = hashlib.blake2b(key.encode(), digest_size=4).digest()
            record["split"] = "eval" if int.from_bytes(digest, "little") % 5 == 0 else "train"
        if key in first and first[key][0] != record["split"]:
            raise ValueError(f"{path}: problem {record['id']!r} ({record['split']}) repeats the question of "
                             f"{first[key][1]!r} ({first[key][0]}): the held-out split overlaps training")
        first.setdefault(key, (record["split"], record["id"]))
    return records


# ---------------------------------------------------------------- parsing


def extract_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} in `text` (nested braces allowed)."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    begin = i
    while i < len(text):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[begin:i].strip()
        i += 1
    return None


_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)(?:```|$)", re.DOTALL | re.IGNORECASE)


def extract_code(text: str) -> str | None:
    """First fenced code block; an unclosed fence runs to the end of the text
    (the stop string may have cut it)."""
    match = _FENCE.search(text)
    if not match:
        return None
    code = match.group(1).strip()
    return code or None


def normalize_answer(text: str) -> str:
    text = re.sub(r"\\text\{([^}]*)\}", r"\1", text)
    text = text.replace("$", "").replace(",", "").replace("\\!", "").strip()
    text = re.sub(r"^x\s*=\s*", "", text)
    text = re.sub(r"\s+", " ", text).lower().rstrip(".")
    return text


def answers_match(given: str, expected: str) -> bool:
    a, b = normalize_answer(given), normalize_answer(expected)
    try:
        return Fraction(a) == Fraction(b)
    except (ValueError, ZeroDivisionError):
        return a == b


# ---------------------------------------------------------------- tool


# ---------------------------------------------------------------- task


class ReactMath:
    """AgentTask: solve a math word problem with a Python tool, answer in \\boxed{}."""

    name = "react_math"
    stop: tuple[str, ...] = ("Python output:",)
    paper_sampling = PAPER_EVAL  # evaluation as Table 8 samples: T 1, top-p 1, top-k 40

    def __init__(self, tool: PythonTool | None = None, turns: int = 4, problems_file: str | Path | None = None) -> None:
        if turns < 1:
            raise TaskOptionError("turns", "must be >= 1", turns)
        self.turns = turns
        # the agent run hands in a sandboxed tool (coevolve.agents.tools.SandboxTool)
        self.tool = tool
        try:
            self.problems = load_problems(problems_file) if problems_file is not None else None
        except ValueError as exc:  # the file and line in `exc`, the [task] key here
            raise TaskOptionError("problems_file", f"is not a usable problems file: {exc}") from None
        self.system_prompt = (
            "You solve math problems step by step. You may use a Python tool: write code in a block\n"
            "```python\nprint(...)\n```\n"
            "and you will see what it prints. When you know the result, reply with the final answer as "
            "\\boxed{ANSWER}, for example \\boxed{42}. "
            f"You have at most {turns} turns."
        )

    def cases(self, split: str, n: int, seed: int = 0) -> list[MathCase]:
        if split not in SPLITS:
            raise ValueError(f"react_math split must be one of {SPLITS}, got {split!r}")
        if self.problems is not None:
            pool = [p for p in self.problems if p["split"] == split]
            if n > len(pool):
                raise ValueError(f"react_math: asked for {n} {split} problems, the file has {len(pool)}")
            random.Random(_case_seed(split, seed, -1)).shuffle(pool)
            return [MathCase(id=p["id"], question=p["question"], answer=p["answer"]) for p in pool[:n]]
        out = []
        for i in range(n):
            rng = random.Random(_case_seed(split, seed, i))
            question, answer = rng.choice(GENERATORS)(rng)
            out.append(MathCase(id=f"{split}-{seed}-{i}", question=question, answer=str(answer)))
        return out

    def max_turns(self, case: MathCase) -> int:
        return self.turns

    # One tool call (a fenced python block) or one boxed answer, nothing else:
    # the decoding-time constraint of a turn's reply (`[agent] constrained`).
    action_pattern = r"(```python\n[^`]{1,800}\n```|\\boxed\{[^{}\n]{1,40}\})"

    def case_key(self, case: MathCase) -> str:
        """What makes two cases the same problem (held-out overlap checks)."""
        return " ".join(case.question.lower().split())

    def reset(self, case: MathCase) -> tuple[MathState, str]:
        return MathState(case=case), f"Problem: {case.question}"

    def step(self, state: MathState, action_text: str) -> tuple[str, bool]:
        if state.done:
            raise ValueError("step() called on a finished react_math episode")
        state.turns += 1
        boxed = extract_boxed(action_text)
        if boxed is not None:
            state.answer = boxed
            state.done = True
            return f"Final answer recorded: {boxed}", True
        code = extract_code(action_text)
        if code is not None:
            state.tool_calls += 1
            if self.tool is None:
                raise RuntimeError("react_math was built without a Python tool; build it with "
                                   "tasks.registry.agent_task('react_math', tool=...)")
            result = self.tool(code)
            if not result.ok:
                state.tool_errors += 1
            output = result.observation()
            if len(output) > OUTPUT_LIMIT:
                output = output[:OUTPUT_LIMIT] + "\n... (output truncated)"
            observation = f"Python output:\n{output}"
        else:
            state.no_action += 1
            observation = "No code block and no \\boxed{} answer found. Run ```python code``` or answer with \\boxed{...}."
        if state.turns >= self.turns:
            state.done = True
            observation += "\nOut of turns."
        return observation, state.done

    def reward(self, state: MathState) -> float:
        return 1.0 if state.answer is not None and answers_match(state.answer, state.case.answer) else 0.0

    def metrics(self, state: MathState) -> dict[str, float]:
        acted = 1.0 - state.no_action / state.turns if state.turns else 0.0
        return {
            "solved": self.reward(state),
            "well_formed": acted,  # share of turns that ran code or answered
            # dense signal for fitness shaping: well-formed actions and an answer given
            "progress": 0.5 * acted + 0.5 * float(state.answer is not None),
            "turns": float(state.turns),
            "answered": float(state.answer is not None),
            "tool_calls": float(state.tool_calls),
            "tool_errors": float(state.tool_errors),
            "no_action": float(state.no_action),
        }

    def close(self) -> None:
        close = getattr(self.tool, "close", None)
        if close is not None:
            close()
