import pytest

from tasks.base import AgentTask
from tasks.registry import get_task
from tasks.sudoku import Sudoku, count_solutions, make_puzzle, parse_action


def solve_moves(case):
    return [
        f"set {r + 1} {c + 1} {case.solution[r][c]}"
        for r in range(len(case.puzzle))
        for c in range(len(case.puzzle))
        if case.puzzle[r][c] == 0
    ]


def test_registered_and_follows_the_agent_protocol():
    task = get_task("sudoku")
    assert isinstance(task, AgentTask)
    assert task.size == 4
    assert get_task("sudoku9").size == 9


@pytest.mark.parametrize("size,masked", [(4, 4), (4, 10), (9, 30)])
def test_puzzles_have_the_mask_and_a_unique_solution(size, masked):
    for seed in range(5 if size == 4 else 2):
        puzzle, solution = make_puzzle(size, masked, seed)
        assert sum(v == 0 for row in puzzle for v in row) == masked
        assert count_solutions(puzzle) == 1
        assert all(p in (0, s) for prow, srow in zip(puzzle, solution) for p, s in zip(prow, srow))


def test_a_puzzle_with_two_solutions_is_detected():
    board = [[0] * 4 for _ in range(4)]
    assert count_solutions(board, limit=2) == 2


def test_cases_are_deterministic_and_splits_differ():
    task = Sudoku(masked=6)
    assert task.cases("train", 5, seed=1) == task.cases("train", 5, seed=1)
    assert task.cases("train", 5, seed=1) != task.cases("train", 5, seed=2)
    train = {c.puzzle for c in task.cases("train", 10, seed=0)}
    held_out = {c.puzzle for c in task.cases("eval", 10, seed=0)}
    assert train != held_out
    with pytest.raises(ValueError, match="split"):
        task.cases("test", 1)


@pytest.mark.parametrize(
    "text,move",
    [
        ("set 1 2 3", (1, 2, 3)),
        ("SET(1, 2, 3)", (1, 2, 3)),
        ("I will set row 4 column 1 to 2.", (4, 1, 2)),
        ("set r1 c2 v4\nset 2 2 2", (1, 2, 4)),
        ("1 2 3", (1, 2, 3)),
        ("(4, 1, 2).", (4, 1, 2)),
        ("(2, 4) 3", (2, 4, 3)),
        ("put 1 2 3", None),
        ("1. 2.", None),
        ("set 1 2", None),
        ("", None),
    ],
)
def test_action_parsing_is_lenient(text, move):
    assert parse_action(text) == move


def test_solving_move_by_move_gives_reward_one():
    task = Sudoku(masked=5)
    case = task.cases("train", 1, seed=3)[0]
    state, observation = task.reset(case)
    assert "Empty cells (row, col): (" in observation and observation.count(") (") == 4  # five listed
    moves = solve_moves(case)
    for i, move in enumerate(moves):
        observation, done = task.step(state, move)
        assert observation.startswith("OK")
        assert done == (i == len(moves) - 1)
    assert "solved" in observation
    assert task.reward(state) == 1.0
    metrics = task.metrics(state)
    assert metrics["correct_moves"] == 5 and metrics["illegal_moves"] == 0 and metrics["turns"] == 5


def test_illegal_moves_are_reported_and_counted():
    task = Sudoku(masked=4)
    case = task.cases("train", 1, seed=0)[0]
    state, _ = task.reset(case)
    given = next((r, c) for r in range(4) for c in range(4) if case.puzzle[r][c])
    empty = next((r, c) for r in range(4) for c in range(4) if case.puzzle[r][c] == 0)
    row_value = next(v for v in case.puzzle[empty[0]] if v)  # already in the empty cell's row
    observation, done = task.step(state, f"set {given[0] + 1} {given[1] + 1} 1")
    assert "given cell" in observation and not done
    observation, _ = task.step(state, f"set {empty[0] + 1} {empty[1] + 1} {row_value}")
    assert observation.startswith("Illegal") and f"{row_value} is already in" in observation
    observation, _ = task.step(state, "set 9 1 1")
    assert "between 1 and 4" in observation
    observation, _ = task.step(state, "no idea")
    assert observation.startswith("Invalid")
    metrics = task.metrics(state)
    assert metrics["illegal_moves"] == 3 and metrics["unparsed"] == 1
    assert state.board == [list(row) for row in case.puzzle]  # nothing illegal was written


def test_turn_budget_ends_the_episode_with_reward_zero():
    task = Sudoku(masked=3)
    case = task.cases("eval", 1, seed=0)[0]
    state, _ = task.reset(case)
    assert task.max_turns(case) == 9
    done = False
    for _ in range(9):
        assert not done
        _, done = task.step(state, "pass")
    assert done and task.reward(state) == 0.0
    with pytest.raises(ValueError, match="finished"):
        task.step(state, "set 1 1 1")


def test_partial_progress_is_measured_but_not_rewarded():
    task = Sudoku(masked=10)
    case = task.cases("train", 1, seed=7)[0]
    state, _ = task.reset(case)
    for move in solve_moves(case)[:3]:
        task.step(state, move)
    assert task.metrics(state)["correct_moves"] == 3
    assert task.metrics(state)["filled_fraction"] == pytest.approx(0.3)
    assert task.reward(state) == 0.0


def test_bad_settings_are_rejected():
    with pytest.raises(ValueError, match="size"):
        Sudoku(size=5)
    with pytest.raises(ValueError, match="masked"):
        Sudoku(size=4, masked=16)


@pytest.mark.parametrize("size,masked", [(4, 1), (4, 2)])
def test_train_and_eval_puzzles_are_disjoint_by_content(size, masked):
    # 4x4 with one masked cell has only a few thousand puzzles: seed-drawn splits would share some
    task = Sudoku(size=size, masked=masked)
    held_out = task.cases("eval", 100, seed=0)
    assert len({c.puzzle for c in held_out}) == 100
    train = {c.puzzle for s in range(3) for c in task.cases("train", 200, seed=s)}
    assert not train & {c.puzzle for c in held_out}


def test_ladders_and_the_move_pattern():
    import re

    from tasks.sudoku import LADDERS, sudoku9

    assert LADDERS == {9: (5, 10, 15), 4: (1, 2, 4)}
    assert sudoku9(masked=5).masked == 5
    pattern = Sudoku(size=4, masked=1).action_pattern
    assert re.fullmatch(pattern, "set 1 4 2") and not re.fullmatch(pattern, "set 1 5 2")
    assert not re.fullmatch(pattern, "I set 1 4 2")
