"""Sudoku as a multi-turn agent task (the paper's long-horizon benchmark).

Puzzles are generated from seeds with a chosen number of masked cells and a
unique solution. The agent places one digit per turn with `set <row> <col>
<value>` (1-indexed); the episode ends when the board is full or after
3 x masked turns. Reward is binary (full and valid); diagnostics count
correct, wrong and illegal moves. 4x4 is the default: the embedded 135M model
cannot do 9x9.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field

from coevolve.base.sampling import PAPER_SUDOKU
from tasks.registry import TaskOptionError

Grid = list[list[int]]  # 0 = empty

SPLITS = ("train", "eval")
# Difficulty ladders (masked cells): the paper's 9x9 levels H* = 5, 10, 15, and a 4x4 one the embedded model can climb.
LADDERS: dict[int, tuple[int, ...]] = {9: (5, 10, 15), 4: (1, 2, 4)}
MOVE_PROMPT = "Your move (set <row> <col> <value>):"


@dataclass(frozen=True)
class SudokuCase:
    id: str
    puzzle: tuple[tuple[int, ...], ...]
    solution: tuple[tuple[int, ...], ...]

    @property
    def masked(self) -> int:
        return sum(v == 0 for row in self.puzzle for v in row)


@dataclass
class SudokuState:
    case: SudokuCase
    board: Grid
    turns: int = 0
    correct_moves: int = 0
    wrong_moves: int = 0  # legal placements that differ from the solution
    illegal_moves: int = 0  # given cell, conflict, out of range
    unparsed: int = 0
    done: bool = False
    history: list[str] = field(default_factory=list)


BOX_SHAPES = {4: (2, 2), 6: (2, 3), 9: (3, 3)}  # board size -> (rows, columns) of a box


def box_shape(size: int) -> tuple[int, int]:
    if size not in BOX_SHAPES:
        raise ValueError(f"sudoku size must be one of {sorted(BOX_SHAPES)}, got {size}")
    return BOX_SHAPES[size]


def conflicts(board: Grid, row: int, col: int, value: int) -> str | None:
    """Why `value` cannot go at (row, col) given the other cells, or None (0-indexed)."""
    size = len(board)
    box_rows, box_cols = box_shape(size)
    if any(board[row][c] == value for c in range(size) if c != col):
        return f"{value} is already in row {row + 1}"
    if any(board[r][col] == value for r in range(size) if r != row):
        return f"{value} is already in column {col + 1}"
    top, left = row - row % box_rows, col - col % box_cols
    for r in range(top, top + box_rows):
        for c in range(left, left + box_cols):
            if (r, c) != (row, col) and board[r][c] == value:
                return f"{value} is already in the box of row {row + 1}, column {col + 1}"
    return None


def count_solutions(board: Grid, limit: int = 2) -> int:
    """Number of completions of `board`, counted up to `limit` (backtracking,
    most-constrained cell first)."""
    size = len(board)
    work = [row[:] for row in board]

    def candidates(r: int, c: int) -> list[int]:
        return [v for v in range(1, size + 1) if conflicts(work, r, c, v) is None]

    def search() -> int:
        best = None
        for r in range(size):
            for c in range(size):
                if work[r][c] == 0:
                    options = candidates(r, c)
                    if best is None or len(options) < len(best[2]):
                        best = (r, c, options)
                        if not options:
                            return 0
        if best is None:
            return 1
        r, c, options = best
        found = 0
        for v in options:
            work[r][c] = v
            found += search()
            work[r][c] = 0
            if found >= limit:
                break
        return found

    return search()


def random_solution(size: int, rng: random.Random) -> Grid:
    board = [[0] * size for _ in range(size)]

    def fill(pos: int) -> bool:
        if pos == size * size:
            return True
        r, c = divmod(pos, size)
        values = list(range(1, size + 1))
        rng.shuffle(values)
        for v in values:
            if conflicts(board, r, c, v) is None:
                board[r][c] = v
                if fill(pos + 1):
                    return True
        board[r][c] = 0
        return False

    fill(0)
    return board


def make_puzzle(size: int, masked: int, seed: int) -> tuple[Grid, Grid]:
    """(puzzle, solution) with exactly `masked` empty cells and a unique
    solution. Retries other solution grids when one cannot be masked that far."""
    if not 1 <= masked < size * size:
        raise ValueError(f"masked must be in 1..{size * size - 1}, got {masked}")
    rng = random.Random(seed)
    for _ in range(50):
        solution = random_solution(size, rng)
        puzzle = [row[:] for row in solution]
        cells = [(r, c) for r in range(size) for c in range(size)]
        rng.shuffle(cells)
        removed = 0
        for r, c in cells:
            if removed == masked:
                break
            puzzle[r][c] = 0
            if count_solutions(puzzle) == 1:
                removed += 1
            else:
                puzzle[r][c] = solution[r][c]
        if removed == masked:
            return puzzle, solution
    raise ValueError(f"could not mask {masked} cells of a {size}x{size} sudoku with a unique solution")


def render(board: Grid) -> str:
    size = len(board)
    box_rows, box_cols = box_shape(size)
    header = "    " + " ".join(str(c + 1) for c in range(size))
    lines = [header]
    for r, row in enumerate(board):
        cells = " ".join(str(v) if v else "." for v in row)
        lines.append(f"{r + 1} | {cells}")
    return "\n".join(lines)


def empty_cells_line(board: Grid) -> str:
    # listing the empty cells spares a small model the coordinate reading
    cells = [f"({r + 1}, {c + 1})" for r, row in enumerate(board) for c, v in enumerate(row) if v == 0]
    return f"Empty cells (row, col): {' '.join(cells)}"


# "set 1 2 3", "set(1, 2, 3)", "Set row 1 column 2 to 3", "SET r1 c2 v3"
_ACTION = re.compile(r"\bset\b\D{0,20}?(\d+)\D{1,20}?(\d+)\D{1,20}?(\d+)", re.IGNORECASE | re.DOTALL)
# a reply that is nothing but three numbers: "1 2 3", "(1, 2, 3)"
_BARE_TRIPLE = re.compile(r"^\W*(\d+)\W+(\d+)\W+(\d+)\W*$")


def parse_action(text: str) -> tuple[int, int, int] | None:
    """First `set <row> <col> <value>` in `text` (1-indexed), leniently; a
    reply of exactly three numbers counts as a move too."""
    match = _ACTION.search(text) or _BARE_TRIPLE.match(text.strip())
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3))


def _case_seed(split: str, seed: int, index: int, size: int, masked: int) -> int:
    digest = hashlib.blake2b(f"sudoku/{split}/{seed}/{index}/{size}/{masked}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "little")


def split_of(puzzle: Grid | tuple) -> str:
    """The split a puzzle belongs to, from its content: one puzzle in five is
    held out. A 4x4 board with one masked cell has only a few thousand
    puzzles, so splits drawn from different seeds alone would share some;
    deciding by content makes train and eval disjoint for every seed and size."""
    digest = hashlib.blake2b(repr([list(row) for row in puzzle]).encode(), digest_size=4).digest()
    return "eval" if int.from_bytes(digest, "little") % 5 == 0 else "train"


class Sudoku:
    """AgentTask: fill a size x size sudoku one cell per turn."""

    stop: tuple[str, ...] = ("\n\n",)
    paper_sampling = PAPER_SUDOKU  # App. D.1.2: T 0.7, top-p 0.8, top-k 20, presence penalty 1.5

    def __init__(self, size: int = 4, masked: int = 4) -> None:
        # the [task] options' own bounds, named as the config writes them (task.size, task.masked)
        if size not in BOX_SHAPES:
            raise TaskOptionError("size", f"must be one of {', '.join(map(str, sorted(BOX_SHAPES)))}", size)
        if not 1 <= masked < size * size:
            raise TaskOptionError("masked", f"must be in 1..{size * size - 1}", masked)
        self.size = size
        self.masked = masked
        self.name = "sudoku" if size == 4 else f"sudoku{size}"
        box_rows, box_cols = box_shape(size)
        self.system_prompt = (
            f"You are playing {size}x{size} Sudoku. Fill every empty cell (shown as .) with a digit "
            f"from 1 to {size} so that each row, each column and each {box_rows}x{box_cols} box "
            f"contains every digit exactly once.\n"
            "Each turn, reply with exactly one move in the form:\n"
            "set <row> <col> <value>\n"
            "Rows and columns are numbered from 1. Example: set 2 3 1"
        )

    def cases(self, split: str, n: int, seed: int = 0) -> list[SudokuCase]:
        if split not in SPLITS:
            raise ValueError(f"sudoku split must be one of {SPLITS}, got {split!r}")
        out: list[SudokuCase] = []
        seen: set = set()
        attempt = 0
        for i in range(n):
            while True:  # draw until the puzzle is new and of this split
                puzzle, solution = make_puzzle(self.size, self.masked,
                                               _case_seed(split, seed, attempt, self.size, self.masked))
                attempt += 1
                key = tuple(tuple(row) for row in puzzle)
                if split_of(puzzle) == split and key not in seen:
                    seen.add(key)
                    break
                if attempt > 200 * (n + 10):
                    raise ValueError(f"sudoku {self.size}x{self.size} with {self.masked} masked has fewer than "
                                     f"{n} distinct {split} puzzles")
            out.append(
                SudokuCase(
                    id=f"{split}-{seed}-{i}",
                    puzzle=tuple(tuple(row) for row in puzzle),
                    solution=tuple(tuple(row) for row in solution),
                )
            )
        return out

    def max_turns(self, case: SudokuCase) -> int:
        return 3 * case.masked

    @property
    def action_pattern(self) -> str:
        """The move format, for decoding-time constraints: `set <row> <col>
        <value>` and nothing else. It fixes the form only; which cell and
        digit stays the model's decision."""
        digit = f"[1-{self.size}]"
        return f"set {digit} {digit} {digit}"

    def case_key(self, case: SudokuCase) -> tuple:
        """What makes two cases the same problem (held-out overlap checks)."""
        return case.puzzle

    def reset(self, case: SudokuCase) -> tuple[SudokuState, str]:
        state = SudokuState(case=case, board=[list(row) for row in case.puzzle])
        return state, f"Puzzle:\n{render(state.board)}\n{empty_cells_line(state.board)}\n{MOVE_PROMPT}"

    def step(self, state: SudokuState, action_text: str) -> tuple[str, bool]:
        if state.done:
            raise ValueError("step() called on a finished sudoku episode")
        state.turns += 1
        feedback = self._apply(state, action_text)
        state.history.append(feedback)
        empty = sum(v == 0 for row in state.board for v in row)
        if empty == 0 or state.turns >= self.max_turns(state.case):
            state.done = True
        if empty == 0:
            status = "The board is full: solved!" if self.reward(state) == 1.0 else "The board is full but not valid."
            return f"{feedback}\n{render(state.board)}\n{status}", True
        return f"{feedback}\n{render(state.board)}\n{empty_cells_line(state.board)}\n{MOVE_PROMPT}", state.done

    def _apply(self, state: SudokuState, action_text: str) -> str:
        move = parse_action(action_text)
        if move is None:
            state.unparsed += 1
            return "Invalid: could not read a move. Reply like: set 1 2 3"
        row, col, value = move
        size = self.size
        if not (1 <= row <= size and 1 <= col <= size and 1 <= value <= size):
            state.illegal_moves += 1
            return f"Illegal: row, column and value must be between 1 and {size} (got set {row} {col} {value})."
        r, c = row - 1, col - 1
        if state.case.puzzle[r][c] != 0:
            state.illegal_moves += 1
            return f"Illegal: row {row}, column {col} is a given cell and cannot change."
        why = conflicts(state.board, r, c, value)
        if why is not None:
            state.illegal_moves += 1
            return f"Illegal: {why}."
        state.board[r][c] = value
        if value == state.case.solution[r][c]:
            state.correct_moves += 1
        else:
            state.wrong_moves += 1
        return f"OK: placed {value} at row {row}, column {col}."

    def reward(self, state: SudokuState) -> float:
        board = state.board
        full = all(v != 0 for row in board for v in row)
        if not full:
            return 0.0
        valid = all(conflicts(board, r, c, board[r][c]) is None for r in range(self.size) for c in range(self.size))
        return 1.0 if valid else 0.0

    def metrics(self, state: SudokuState) -> dict[str, float]:
        masked = state.case.masked
        filled = sum(
            state.board[r][c] != 0 for r in range(self.size) for c in range(self.size) if state.case.puzzle[r][c] == 0
        )
        cells_right = sum(
            state.board[r][c] == state.case.solution[r][c]
            for r in range(self.size)
            for c in range(self.size)
            if state.case.puzzle[r][c] == 0
        )
        format_rate = 1.0 - state.unparsed / state.turns if state.turns else 0.0
        return {
            "solved": self.reward(state),
            "well_formed": format_rate,  # share of turns whose reply was a readable move
            # dense signal for fitness shaping: well-formed moves and right cells
            "progress": 0.5 * format_rate + 0.5 * cells_right / masked,
            "turns": float(state.turns),
            "correct_moves": float(state.correct_moves),
            "wrong_moves": float(state.wrong_moves),
            "illegal_moves": float(state.illegal_moves),
            "unparsed": float(state.unparsed),
            "filled_fraction": filled / masked,
            "cells_right_fraction": cells_right / masked,
        }


def sudoku9(masked: int = 10) -> Sudoku:
    return Sudoku(size=9, masked=masked)
