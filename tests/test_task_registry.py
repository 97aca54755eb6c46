"""A new task is one module plus one registry line: a toy task of each kind,
registered from inside the test, runs through the config and CLI path
(`coevolve tasks`, `coevolve eval` in the real sandbox, `coevolve run` of an
agent config with its [task] options) with no other change anywhere."""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

import numpy as np
import pytest

from coevolve.cli import main
from coevolve.engine.base import Completion
from coevolve.runstore import RunStore
from tasks import registry
from tasks.base import AgentTask, HeuristicTask, InvalidSolution


class ToyPick:
    """Heuristic task: pick the largest number of a list; objective = mean value picked."""

    name = "toy_pick"
    description = "Pick one number from a list; larger is better."
    function_name = "pick"
    template = "def pick(values):\n    \"\"\"Index of the chosen value.\"\"\"\n    return 0\n"
    direction = "max"
    train = ("train", 5)

    def splits(self):
        return {"train": [5], "test": [5, 9]}

    def instances(self, split, size):
        rng = np.random.default_rng([size, 0 if split == "train" else 1])
        return [rng.integers(0, 100, size).tolist() for _ in range(4)]

    def decide(self, fn, instances):
        for values in instances:  # untrusted side: only the chosen index leaves it
            yield fn(list(values))

    def score(self, decisions, instances):
        total = 0.0
        for index, values in zip(decisions, instances):
            if not isinstance(index, int) or not 0 <= index < len(values):
                raise InvalidSolution(f"index {index!r} out of range")
            total += values[index]
        return total / len(instances)

    def instance_seconds(self, size):
        return 2.0

    def reference(self, split, size):
        return None


class ToyEcho:
    """Agent task: say the number shown; reward 1 when the reply holds it."""

    stop = ("\n",)

    def __init__(self, number: int = 7) -> None:
        self.number = number
        self.name = "toy_echo"
        self.system_prompt = "Repeat the number you are shown."

    def cases(self, split, n, seed):
        return [SimpleNamespace(id=f"{split}-{seed}-{i}") for i in range(n)]

    def reset(self, case):
        return {"said": None}, f"The number is {self.number}."

    def step(self, state, action_text):
        state["said"] = action_text
        return "ok", True

    def max_turns(self, case):
        return 1

    def reward(self, state):
        return 1.0 if str(self.number) in (state["said"] or "") else 0.0

    def metrics(self, state):
        return {"progress": self.reward(state)}


class EchoEngine:
    """Stands in for the engine ES moves: says 7 at even seeds, 3 elsewhere."""

    device = "fake"

    def __init__(self):
        self.seed = None
        self.updates = 0

    @contextmanager
    def perturbed(self, seed, sigma):
        self.seed = seed
        try:
            yield
        finally:
            self.seed = None

    def chat(self, conversations, sampling, seeds=None):
        say = "7" if self.seed is None or self.seed % 2 == 0 else "3"
        return [Completion(text=say) for _ in conversations]

    def apply_update(self, seeds, coefficients, alpha):
        self.updates += 1

    def checksum(self):
        return f"echo-{self.updates}"

    def noise_info(self):
        return {"noise": "full", "rank": None}

    def close(self):
        pass


@pytest.fixture
def toys():
    registry.register_heuristic("toy_pick", ToyPick)  # the one registry line of each kind
    registry.register_agent("toy_echo", ToyEcho)
    yield
    registry.unregister("toy_pick")
    registry.unregister("toy_echo")


def test_lookups_are_typed_by_kind(toys):
    assert isinstance(registry.heuristic_task("toy_pick"), HeuristicTask)
    assert isinstance(registry.agent_task("toy_echo", {"number": 5}), AgentTask)
    assert registry.kind("toy_pick") == "heuristic" and registry.kind("toy_echo") == "agent"
    with pytest.raises(registry.UnknownTask, match="'toy_echo' is an agent task, not a heuristic-design task"):
        registry.heuristic_task("toy_echo")
    with pytest.raises(registry.UnknownTask, match="'toy_pick' is a heuristic-design task, not an agent task"):
        registry.agent_task("toy_pick")
    with pytest.raises(registry.TaskOptionError, match=r"task.colour is not an option of toy_echo \(its options: number\)"):
        registry.agent_task("toy_echo", {"colour": "red"})
    with pytest.raises(ValueError, match="already registered"):
        registry.register_agent("sudoku", ToyEcho)


def test_a_registered_heuristic_task_is_listed_and_scored_by_the_cli(toys, tmp_path, capsys):
    assert main(["tasks"]) == 0
    assert "toy_pick  pick()  maximise  train on train 5" in capsys.readouterr().out
    program = tmp_path / "best.py"
    program.write_text("def pick(values):\n    return max(range(len(values)), key=values.__getitem__)\n")
    assert main(["eval", str(program), "--task", "toy_pick", "--split", "test"]) == 0
    out = capsys.readouterr().out
    task = ToyPick()
    for size in (5, 9):  # scored in the sandbox's worker, which knows the task by its class
        best = np.mean([max(v) for v in task.instances("test", size)])
        assert f"{best:.4f}" in out


def test_a_registered_agent_task_runs_from_a_config_with_its_options(toys, tmp_path, monkeypatch, capsys):
    import coevolve.engine.pool as pool

    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: EchoEngine())
    config = tmp_path / "toy.toml"
    config.write_text('[run]\nmethod = "esopt"\ntask = "toy_echo"\nbudget = 8\n[task]\nnumber = 7\n'
                      '[agent]\npopulation = 4\nbatch = 2\neval_cases = 2\n')
    assert main(["run", str(config), "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "toy_echo" in out and "8 / 8" in out
    events = RunStore.open(tmp_path / "run").events()
    (round_event,) = [e for e in events if e["type"] == "round"]
    even = [m["seed"] % 2 == 0 for m in round_event["members"]]
    assert round_event["fitness"] == [1.0 if e else 0.0 for e in even]  # the members at even seeds said 7
    assert round_event["mean_reward"] == sum(even) / len(even)
    # an option the toy's factory does not take is a config error naming it
    config.write_text('[run]\ntask = "toy_echo"\nbudget = 8\n[task]\nnumbr = 7\n[agent]\npopulation = 4\nbatch = 2\n')
    assert main(["run", str(config), "--out", str(tmp_path / "bad")]) == 2
    assert "config error: task.numbr is not an option of toy_echo (its options: number)" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_command_line_task_options_read_as_a_configs_values():
    """`--option KEY=VALUE` as a [task] table would hold it: TOML values where VALUE is one, else a string."""
    from coevolve.commands.agent_eval import parse_options

    assert parse_options(["a=4", "b=2.5", "c=true", 'd="x y"', "e=file.jsonl", "f=-3", "g=[1, 2]"]) == {
        "a": 4, "b": 2.5, "c": True, "d": "x y", "e": "file.jsonl", "f": -3, "g": [1, 2]}


def test_an_option_of_another_type_than_its_default_is_named(tmp_path):
    """Checked against the constructor's default: an int option takes an int (not a bool), a float one an
    int or a float, a str one a str; one without a default, or defaulting to None, takes anything."""
    from tasks.registry import TaskOptionError, agent_task

    env = tmp_path / "env.py"
    env.write_text(
        "from tasks.base import AgentTask\n"
        "class Env:\n"
        "    name, system_prompt, stop = 'env', 'play', ('\\n',)\n"
        "    def __init__(self, turns: int = 3, rate: float = 0.5, label: str = 'a', strict: bool = False,\n"
        "                 path=None):\n"
        "        self.options = (turns, rate, label, strict, path)\n"
        "    def cases(self, split, n, seed): return []\n"
        "    def reset(self, case): return None, 'start'\n"
        "    def step(self, state, action): return 'ok', True\n"
        "    def max_turns(self, case): return 1\n"
        "    def reward(self, state): return 0.0\n"
        "    def metrics(self, state): return {}\n")
    ok = agent_task(str(env), {"turns": 5, "rate": 2, "label": "b", "strict": True, "path": 7})
    assert ok.options == (5, 2, "b", True, 7)
    for options, message in [({"turns": 2.0}, "task.turns must be an integer, as its default 3 is (got 2.0)"),
                             ({"turns": True}, "task.turns must be an integer, as its default 3 is (got True)"),
                             ({"rate": "fast"}, "task.rate must be a number, as its default 0.5 is (got 'fast')"),
                             ({"rate": False}, "task.rate must be a number, as its default 0.5 is (got False)"),
                             ({"label": 1}, "task.label must be a string, as its default 'a' is (got 1)"),
                             ({"strict": 1}, "task.strict must be true or false, as its default False is (got 1)")]:
        with pytest.raises(TaskOptionError) as caught:
            agent_task(str(env), options)
        assert str(caught.value) == message


def test_a_folder_named_as_a_task_points_to_its_task_file(tmp_path, monkeypatch):
    """`coevolve new-task mine` makes mine/problem.py; a newcomer then names the folder."""
    from tasks.registry import UnknownTask, heuristic_task, unknown_name

    folder = tmp_path / "mine"
    folder.mkdir()
    for name in ("test_problem.py", "helpers.py", "problem.py"):
        (folder / name).write_text("")
    monkeypatch.chdir(tmp_path)
    assert unknown_name("mine").endswith("; mine is a folder: give its task file, e.g. mine/problem.py")
    with pytest.raises(UnknownTask, match=r"; mine is a folder: give its task file, e.g. mine/problem.py$"):
        heuristic_task("mine")
    (folder / "problem.py").unlink()
    assert unknown_name("mine").endswith("e.g. mine/helpers.py")  # never the test file
    assert "is a folder" not in unknown_name("tsp_constrct")
