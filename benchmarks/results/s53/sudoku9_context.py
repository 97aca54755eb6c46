"""s53 finding 5: how long do the 9x9 Sudoku paper preset's prompts get, in tokens?

Measured, not estimated: the preset (examples/paper/agents/sudoku_esopt.toml) is loaded as `coevolve run`
loads it, its task is built by the config (`config.build_task()`, tasks/sudoku.py: 9x9, 10 masked, 3 x 10 =
30 turns), and every episode is played by the real rollout (`coevolve.agents.rollout.rollout`, the prompt
builder the agent runs use, with the preset's `agent.history_turns` and seed skills) against a scripted
generator that answers each turn with a plausible move and counts the prompt it was sent exactly as the
in-process engine counts it (coevolve/engine/vllm_engine.py `_chat_prompt` + `_token_counts`: the
checkpoint's chat template with the generation prompt, then the tokenizer without special tokens). The
tokenizer is the embedded model's (coevolve.engine.models.resolve(None): SmolLM2-135M-Instruct), loaded
with transformers' AutoTokenizer (no weights).

Every episode plays all 30 turns: a move that fills a cell every third turn (9 of the 10 masked cells, so
the board is never full) and, in between, moves that leave the board unchanged (a given cell, a digit
already in the row); each observation repeats the board, as the task's do. Two reply styles: terse
(`set r c v`, what a model that keeps the format writes) and 64 tokens (the preset's per-turn cap: a line
of reasoning, then the move).

    .venv/bin/python benchmarks/results/s53/sudoku9_context.py [--history-turns none 1 2] [--cases 8]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from coevolve.agents.rollout import rollout  # noqa: E402
from coevolve.commands.run import load_run_config  # noqa: E402
from coevolve.engine.base import Completion  # noqa: E402
from coevolve.engine.models import resolve  # noqa: E402

PRESET = ROOT / "examples" / "paper" / "agents" / "sudoku_esopt.toml"
REASONING = ("Looking at the board, the empty cells in this row still need a few digits, and the column and "
             "the box already hold several of them, so only one digit can go in the cell I pick next. ")


class ScriptedGenerator:
    """One case per rollout: turn k's reply is scripted from the case; every prompt is counted."""

    def __init__(self, tokenizer, case, style: str, max_tokens: int) -> None:
        self.tokenizer, self.case, self.style, self.max_tokens = tokenizer, case, style, max_tokens
        self.turn = 0
        self.prompt_tokens: list[int] = []  # per turn, the prompt as the engine counts it
        self.reply_tokens: list[int] = []
        size = len(case.puzzle)
        self.blanks = [(r, c) for r in range(size) for c in range(size) if case.puzzle[r][c] == 0]
        self.givens = [(r, c) for r in range(size) for c in range(size) if case.puzzle[r][c] != 0]

    def count(self, conversation) -> int:
        text = self.tokenizer.apply_chat_template(list(conversation), add_generation_prompt=True, tokenize=False)
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def move(self) -> str:
        k = self.turn
        if k % 3 == 2 and k // 3 < len(self.blanks) - 1:  # every third turn fills a cell; one stays empty
            r, c = self.blanks[k // 3]
            return f"set {r + 1} {c + 1} {self.case.solution[r][c]}"
        if k % 2 == 0:  # a given cell: "Illegal: row r, column c is a given cell and cannot change."
            r, c = self.givens[(7 * k) % len(self.givens)]
            return f"set {r + 1} {c + 1} {self.case.puzzle[r][c]}"
        r, c = self.blanks[-1]  # a digit already in that row: "Illegal: d is already in row r."
        row_digits = [v for v in self.case.puzzle[r] if v]
        return f"set {r + 1} {c + 1} {row_digits[k % len(row_digits)]}"

    def reply(self) -> str:
        move = self.move()
        if self.style == "terse":
            return move
        room = self.max_tokens - len(self.tokenizer(" " + move, add_special_tokens=False)["input_ids"])
        ids = self.tokenizer((REASONING * 4), add_special_tokens=False)["input_ids"][:room]
        return self.tokenizer.decode(ids).rstrip() + " " + move  # about max_tokens tokens, the move last

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        assert len(conversations) == 1
        self.prompt_tokens.append(self.count(conversations[0]))
        text = self.reply()
        self.reply_tokens.append(len(self.tokenizer(text, add_special_tokens=False)["input_ids"]))
        self.turn += 1
        return [Completion(text=text)]


def first_over(values: list[int], limit: int) -> int | None:
    """The first turn (1-based) whose value passes `limit`, or None."""
    return next((t for t, v in enumerate(values, start=1) if v > limit), None)


def earliest(turns: list[int | None]) -> str:
    found = [t for t in turns if t is not None]
    return f"turn {min(found)}" + ("" if len(found) == len(turns) else f" ({len(found)} of {len(turns)} cases)") \
        if found else "never"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--history-turns", nargs="+", default=["none", "preset", "2"],
                   help="'preset' (the file's value), 'none' (the whole history) or k")
    p.add_argument("--cases", type=int, default=8, help="train puzzles played per setting (default 8)")
    args = p.parse_args(argv)

    from transformers import AutoTokenizer

    model_dir = resolve(None)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    config = load_run_config(str(PRESET), {})
    task = config.build_task()
    sampling = config.sampling
    max_len, max_tokens = config.model.max_len, sampling.max_tokens
    cases = task.cases("train", args.cases, seed=config.run.seed)
    print(f"preset: {PRESET.relative_to(ROOT)}: task {task.name}, masked {task.masked}, "
          f"{task.max_turns(cases[0])} turns, sampling.max_tokens {max_tokens}, model.max_len {max_len}, "
          f"agent.history_turns {config.agent.history_turns}")
    print(f"tokenizer: {model_dir} (AutoTokenizer, chat template with the generation prompt, as the engine counts)")
    first = task.reset(cases[0])[1]
    counter = ScriptedGenerator(tokenizer, cases[0], "terse", max_tokens)
    first_prompt = counter.count([{"role": "system", "content": task.system_prompt}, {"role": "user", "content": first}])
    print(f"system prompt {len(tokenizer(task.system_prompt, add_special_tokens=False)['input_ids'])} tokens; "
          f"first observation {len(tokenizer(first, add_special_tokens=False)['input_ids'])} tokens; "
          f"first prompt {first_prompt} tokens (case {cases[0].id})")
    print()
    print("| history_turns | replies | turns played | reply tokens (max) | last prompt (turn 30), tokens: "
          "max [min] | + reply cap | whole episode, tokens | past 2048 from: prompt / prompt + cap | "
          "past 8192 from: prompt / prompt + cap |")
    print("|---|---|---|---|---|---|---|---|---|")
    for setting in args.history_turns:
        history = (config.agent.history_turns if setting == "preset" else None if setting == "none"
                   else int(setting))
        label = f"{history}" + (" (preset)" if setting == "preset" else "")
        for style in ("terse", "64 tokens"):
            lasts, wholes, over_small, over_large, turns, replies = [], [], [], [], [], []
            for case in cases:
                generator = ScriptedGenerator(tokenizer, case, style, max_tokens)
                [trajectory] = rollout(generator, task, [case], replace(sampling), seed=config.run.seed,
                                       skills=(), history_turns=history)
                assert trajectory.turns == task.max_turns(case) and trajectory.finish == "turn_budget", trajectory
                need = [n + max_tokens for n in generator.prompt_tokens]
                lasts.append(generator.prompt_tokens[-1])
                whole = trajectory.messages  # what a whole-history prompt after all 30 turns would hold
                wholes.append(generator.count(whole))
                over_small.append((first_over(generator.prompt_tokens, 2047), first_over(need, 2048)))
                over_large.append((first_over(generator.prompt_tokens, 8191), first_over(need, 8192)))
                turns.append(trajectory.turns)
                replies.append(max(generator.reply_tokens))
            print(f"| {label} | {style} | {max(turns)} | {max(replies)} | {max(lasts)} [{min(lasts)}] | "
                  f"{max(lasts) + max_tokens} | {max(wholes)} | {earliest([a for a, _ in over_small])} / {earliest([b for _, b in over_small])} | "
                  f"{earliest([a for a, _ in over_large])} / {earliest([b for _, b in over_large])} |")
    print()
    print("'last prompt': the prompt of the 30th turn (29 turns of history), the longest the engine is sent; "
          "'+ reply cap': plus sampling.max_tokens; 'whole episode': all 30 turns' messages as one prompt. "
          "'past N from': the first turn whose prompt alone "
          "the engine refuses (prompt >= N tokens, vllm_engine.py _check_lengths) / whose prompt + max_tokens passes N "
          "(a reply could be cut), the earliest over the cases.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
