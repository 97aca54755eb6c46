"""__NAME__: a coevolve agent task (written by `coevolve new-task __NAME__ --agent`; edit it).

The environment here is a placeholder to replace with yours: find a hidden
whole number by guessing; after each guess the environment says whether the
number is higher or lower. The model plays it one reply per turn; ES tunes
its weights on the training cases' rewards, Trace2Skill distils a skill from
its episodes, and held-out cases measure both (Mean@k / Pass@k).

How coevolve uses this file (docs/own_problem.md, "Your own agent environment"):
- `cases(split, n, seed)` draws the problems: "train" ones for ES fitness and
  skill distillation, "eval" ones held out. Same arguments, same cases, in
  every process (a random generator seeded by split, seed and index); no
  eval case may be a training problem.
- `reset(case)` starts an episode: (state, first observation). `step(state,
  reply)` applies one raw model reply: (observation, done). Replies are
  whatever the model wrote: read them leniently and answer an unreadable one
  with an observation saying so, never an exception.
- `reward(state)` in [0, 1] is read when the episode ends (done, or
  `max_turns`); `metrics(state)` are numbers for logs and reports: its
  "progress" in [0, 1] is a dense signal ES can add to the reward
  (`agent.shaping`), its "well_formed" (the share of turns that were readable
  actions) the well-formed column of `coevolve eval` and agent comparisons.
- Optional: `action_pattern`, a regular expression every reply must match
  when `agent.constrained` (decoded under it: it fixes the form, the model
  still chooses the move; check-task also plays random replies of that form,
  so `step` must answer any of them); `case_key(case)`, what makes two
  cases the same problem (default: the case's fields other than `id`).
- The constructor's keywords are the config's `[task]` options.

This file is your code: it runs in coevolve's process, unsandboxed (the
model's replies are the untrusted part, and they are plain text here).

Check it:  coevolve check-task env.py
Run it:    coevolve run config.toml
"""

from __future__ import annotations

import math
import random
import re
import zlib
from dataclasses import dataclass

SPLITS = ("train", "eval")
RANGES = (16, 32, 64, 128, 256)  # a case's number lies in 1..high, high one of these (over 100 eval problems)
GUESS = re.compile(r"guess\s*:?\s*(-?\d+)", re.IGNORECASE)
PROMPT = "Your guess (guess <number>):"


@dataclass(frozen=True)
class Case:
    id: str
    high: int
    secret: int


@dataclass
class State:
    case: Case
    low: int  # the numbers still possible after the answers so far
    high: int
    turns: int = 0
    found: bool = False
    unreadable: int = 0
    wasted: int = 0  # guesses outside what the answers so far allowed


def split_of(high: int, secret: int) -> str:
    """A problem's split, decided by its content: one in four is held out, so train and eval never
    share a problem whatever the seeds."""
    return "eval" if zlib.crc32(f"{high}:{secret}".encode()) % 4 == 0 else "train"


class __CLASS__:
    name = "__NAME__"
    stop = ("\n",)  # a reply ends at its first line break: one guess per turn
    action_pattern = "guess [1-9][0-9]{0,2}"  # the form only: a number out of range is the model's mistake

    def __init__(self, extra_turns: int = 1) -> None:
        if not 0 <= extra_turns <= 10:
            raise ValueError(f"extra_turns must be in 0..10, got {extra_turns}")
        self.extra_turns = extra_turns
        self.system_prompt = (
            "You are playing a guessing game. A whole number is hidden; you are told its range. "
            "Each turn, reply with exactly one guess in the form:\n"
            "guess <number>\n"
            "After each guess you are told whether the hidden number is higher or lower. "
            "Find it in as few guesses as you can. Example: guess 8"
        )

    def cases(self, split: str, n: int, seed: int = 0) -> list[Case]:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        rng = random.Random(f"__NAME__:{split}:{seed}")
        out: list[Case] = []
        seen: set[tuple[int, int]] = set()
        for _ in range(200 * (n + 10)):
            if len(out) == n:
                break
            high = rng.choice(RANGES)
            secret = rng.randint(1, high)
            if split_of(high, secret) == split and (high, secret) not in seen:
                seen.add((high, secret))
                out.append(Case(id=f"{split}-{seed}-{len(out)}", high=high, secret=secret))
        if len(out) < n:
            raise ValueError(f"only {len(out)} distinct {split} problems, {n} asked for")
        return out

    def max_turns(self, case: Case) -> int:
        return math.ceil(math.log2(case.high)) + self.extra_turns  # binary search needs log2(high)

    def reset(self, case: Case) -> tuple[State, str]:
        state = State(case=case, low=1, high=case.high)
        return state, (f"I am thinking of a whole number between 1 and {case.high}. "
                       f"You have {self.max_turns(case)} guesses.\n{PROMPT}")

    def step(self, state: State, action_text: str) -> tuple[str, bool]:
        state.turns += 1
        match = GUESS.search(action_text)
        if match is None:
            state.unreadable += 1
            answer = "I could not read a guess. Reply like: guess 8"
        else:
            guess = int(match.group(1))
            if not state.low <= guess <= state.high:
                state.wasted += 1
            if guess == state.case.secret:
                state.found = True
                return f"Correct! The number is {guess}.", True
            if guess < state.case.secret:
                state.low = max(state.low, guess + 1)
                answer = f"{guess} is too low: the number is higher."
            else:
                state.high = min(state.high, guess - 1)
                answer = f"{guess} is too high: the number is lower."
        left = self.max_turns(state.case) - state.turns
        if left <= 0:
            return f"{answer}\nNo guesses left: the number was {state.case.secret}.", True
        return f"{answer}\n{left} guess{'es' * (left != 1)} left.\n{PROMPT}", False

    def reward(self, state: State) -> float:
        return 1.0 if state.found else 0.0

    def metrics(self, state: State) -> dict[str, float]:
        # progress: how far the answers narrowed the range (1: found)
        span = state.high - state.low + 1
        progress = 1.0 if state.found else 1.0 - math.log2(max(span, 1)) / math.log2(state.case.high)
        # well_formed: the share of turns whose reply held a readable guess (coevolve eval's well-formed column)
        well_formed = 1.0 - state.unreadable / state.turns if state.turns else 0.0
        return {"solved": self.reward(state), "progress": progress, "well_formed": well_formed,
                "turns": float(state.turns), "unreadable": float(state.unreadable), "wasted": float(state.wasted)}
