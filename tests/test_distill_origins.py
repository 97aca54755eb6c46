"""`coevolve distill` says where its rules came from (s51 walkthrough, finding 3): code's contract lines,
the analysts' patches, or the stand-ins made of the failures themselves when no analyst wrote a usable
line; counted as the skill is built, the same words in the command's line and the SKILL.md's intro, for
heuristic and agent runs alike. Fake teachers: no engine."""

from __future__ import annotations

import json
import re

from coevolve.agents.rollout import Trajectory, save_trajectories
from coevolve.base.skills import load_skill
from coevolve.cli import main
from coevolve.commands import distill as command
from coevolve.engine.base import Completion
from coevolve.search.population import Candidate
from coevolve.search.skill import refresh


class Teacher:
    """Replies `reply` to every analyst; counts its calls' sizes."""

    def __init__(self, reply: str = "I am not sure what went wrong here.") -> None:
        self.reply, self.sizes = reply, []

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        self.sizes.append(len(conversations))
        return [Completion(text=self.reply) for _ in conversations]

    def close(self) -> None:
        pass


def failure(i: int, kind: str = "exception", message: str = "NameError: name 'dist' is not defined") -> Candidate:
    return Candidate(id=i, step=1, operator="i1", parents=[], model_state={"kind": "base"},
                     code="def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):"
                          "\n    return dist", failure=kind, message=f"line {i}: {message}")


def heuristic_run(folder, candidates) -> None:
    folder.mkdir()
    (folder / "config.toml").write_text('[run]\ntask = "tsp_construct"\nmethod = "eoh"\nbudget = 8\n')
    (folder / "candidates.jsonl").write_text("".join(json.dumps(c.model_dump(mode="json")) + "\n"
                                                     for c in candidates))


def distil(monkeypatch, run, out, teacher, *extra):
    monkeypatch.setattr(command, "teacher", lambda args: (teacher, None))
    return main(["distill", str(run), "--out", str(out), *extra])


def test_a_heuristic_runs_fallback_skill_says_no_analysis_gave_a_rule(tmp_path, monkeypatch, capsys):
    heuristic_run(tmp_path / "runs_demo", [failure(1), failure(2, "parse", "no code")])
    assert distil(monkeypatch, tmp_path / "runs_demo", tmp_path / "tsp-learnt", Teacher()) == 0
    out = capsys.readouterr().out
    said = "5 rules (3 contract, 2 from the failures' own kinds; 0 of 2 analyses gave a usable rule)"
    assert f"tsp-learnt/SKILL.md: {said} from 2 tsp_construct candidates" in out
    skill = load_skill(tmp_path / "tsp-learnt")
    assert f"From 2 error and 0 success analyses of 2 tsp_construct candidates: {said}." in skill.body
    # the task's name, not the skill folder's, says what the rules are for
    assert skill.description.startswith("Rules for writing tsp_construct heuristics")


def test_a_heuristic_runs_usable_analyses_are_counted_as_theirs(tmp_path, monkeypatch, capsys):
    heuristic_run(tmp_path / "r", [failure(1), failure(2)])
    teacher = Teacher("ADD Names: Define every name before the function uses it.")
    assert distil(monkeypatch, tmp_path / "r", tmp_path / "learnt", teacher, "--description", "Mine.") == 0
    assert ("4 rules (3 contract, 1 from the analyses; 2 of 2 analyses gave a usable rule) from 2 tsp_construct "
            "candidates") in capsys.readouterr().out
    assert load_skill(tmp_path / "learnt").description == "Mine."  # --description reaches a heuristic run's skill


def test_a_patched_skills_own_rules_are_counted_as_kept(tmp_path, monkeypatch, capsys):
    heuristic_run(tmp_path / "r", [failure(1)])
    previous = tmp_path / "mine"
    previous.mkdir()
    (previous / "SKILL.md").write_text("---\nname: mine\ndescription: d\n---\n## Ideas\n- Visit the nearest "
                                       "unvisited node first.\n")
    assert distil(monkeypatch, tmp_path / "r", tmp_path / "next", Teacher(), "--previous", str(previous)) == 0
    assert ("5 rules (3 contract, 1 from the failures' own kinds, 1 kept from the previous skill; "
            "0 of 1 analysis gave a usable rule)") in capsys.readouterr().out


def test_the_runs_own_refreshes_say_the_same(tmp_path):
    """A +trace2skill run's refresh is built by the same code: its intro counts the same way."""
    _, body = refresh(None, ["nothing usable"] * 3, [failure(1), failure(2), failure(3)],
                      ["Define f.", "Return a node."], "tsp_construct", "3 error and 0 success analyses")
    assert ("From 3 error and 0 success analyses: 3 rules (2 contract, 1 from the failures' own kinds; "
            "0 of 3 analyses gave a usable rule).") in body


def trace(case: str, feedback: str = "Illegal: 3 is already in row 1.") -> Trajectory:
    return Trajectory(task="sudoku", case_id=case,
                      messages=[{"role": "system", "content": "Play sudoku."}, {"role": "user", "content": "P"}],
                      actions=["set 1 1 3"], observations=["Puzzle", feedback], reward=0.0, turns=1)


def test_an_agent_runs_fallback_skill_says_no_analysis_gave_a_rule(tmp_path, monkeypatch, capsys):
    save_trajectories([trace("a"), trace("b", "Invalid: no such cell.")], tmp_path / "run" / "trajectories" /
                      "round_000", "rollouts")
    assert distil(monkeypatch, tmp_path / "run", tmp_path / "sudoku-mine", Teacher()) == 0
    said = "2 rules (2 from the environment's own error lines; 0 of 2 analyses gave a usable rule)"
    assert f"sudoku-mine/SKILL.md: {said} from 2 trajectories" in capsys.readouterr().out
    skill = load_skill(tmp_path / "sudoku-mine")
    assert f"From 2 error and 0 success analyses of 2 sudoku trajectories: {said}." in skill.body
    assert skill.description.startswith("Rules for the sudoku agent task")


def test_a_bar_shows_the_analyst_requests_on_stderr(tmp_path, monkeypatch, capsys):
    heuristic_run(tmp_path / "r", [failure(1), failure(2)])
    teacher = Teacher()
    assert distil(monkeypatch, tmp_path / "r", tmp_path / "a", teacher) == 0
    err = capsys.readouterr().err
    assert teacher.sizes == [2]  # still one batched call
    assert re.search(r"distill tsp_construct: 100%.*2/2 \[.*request", err), err
    assert distil(monkeypatch, tmp_path / "r", tmp_path / "b", Teacher(), "--no-progress") == 0
    assert "distill tsp_construct" not in capsys.readouterr().err


def test_a_heuristic_runs_candidates_file_names_its_run_directory(tmp_path, capsys):
    heuristic_run(tmp_path / "runs_demo", [failure(1)])
    assert main(["distill", str(tmp_path / "runs_demo" / "candidates.jsonl"), "--out", str(tmp_path / "q")]) == 2
    err = capsys.readouterr().err
    assert "this is a heuristic run's candidates.jsonl: give its run directory" in err
    assert str(tmp_path / "runs_demo") in err and "Trajectory.__init__" not in err


class StreamingTeacher(Teacher):
    """An endpoint's shape: replies arrive one by one, each handed to `on_each`."""

    streams = True

    def chat(self, conversations, sampling, seeds=None, constraints=None, on_each=None):
        replies = super().chat(conversations, sampling, seeds, constraints)
        for index, completion in enumerate(replies):
            on_each(index, completion)
        return replies


def test_an_endpoints_replies_move_the_bar_one_by_one(tmp_path, monkeypatch, capsys):
    heuristic_run(tmp_path / "r", [failure(1), failure(2)])
    assert distil(monkeypatch, tmp_path / "r", tmp_path / "a", StreamingTeacher()) == 0
    assert re.search(r"distill tsp_construct: +50%.*1/2", capsys.readouterr().err)


def test_rules_the_teacher_wrote_condensing_are_counted_as_such(tmp_path):
    from coevolve.agents.trace2skill import distill

    def reply(user: str) -> str:
        if "Merged rules:" in user:
            return "- Check the row and column before placing any digit.\n- Check the box before placing a digit."
        number = re.search(r"Illegal: (\d+) is", user).group(1)
        return f"ADD Moves: Check cell {number} against its row before every move."

    class Scripted(Teacher):
        def chat(self, conversations, sampling, seeds=None, constraints=None):
            return [Completion(text=reply(c[-1]["content"])) for c in conversations]

    traces = [trace(str(i), f"Illegal: {i} is already in row 1.") for i in range(6)]
    _, origins = distill(Scripted(), traces, tmp_path / "condensed")
    assert origins.summary() == "2 rules (2 condensed by the teacher; 6 of 6 analyses gave a usable rule)"
