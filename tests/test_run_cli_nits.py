"""Three CLI nits from the s53 walkthroughs (walkthrough_serving.md finding 13, closing_note.md "Left"):

- `coevolve run --resume DIR` announces `resuming: DIR` without advising `coevolve run --resume DIR`, the
  command that was just typed and that a refusal met later would meet again;
- a prompt that outgrew the model's context stops a run whose directory is written: exit 1 (as other stops
  mid-run; 2 is a command refused before anything was written), saying the directory is kept and how to go
  on, with advice only of what the run has (no eoh.parents for a Sample run, the context of the model asked);
- `coevolve distill --out DIR` on a read-only folder is refused before any teacher request, not after.

Real CLI path: a stub server on loopback as the endpoint (tests/endpoint_stub.py), the fake engine where the
CLI builds one (tests/search_fakes.py), the real sandbox on tsp_construct; a read-only folder through
tests/test_write_failures.py's stand-ins (tests may run as root, where chmod does not stop a write)."""

from __future__ import annotations

import json

import pytest
import endpoint_stub

from coevolve.cli import main
from coevolve.engine import pool
from coevolve.engine.base import ContextLengthError
from test_endpoint_replies import write_config
from test_write_failures import (READ_ONLY, ClosingFakeEngine, CountingTeacher, Interrupting, config_file,
                                 error_lines, read_only, whole_run)

stub, no_key = endpoint_stub.stub, endpoint_stub.no_key  # its fixtures, where pytest finds them


def test_a_served_prompt_past_the_context_exits_1_keeps_the_run_and_a_resume_is_not_told_to_resume(
        stub, tmp_path, capsys, monkeypatch):
    stub.mode, stub.good_first = "toolong", 2  # step 0 (two candidates) is answered; step 1's prompts are too long
    out = tmp_path / "run"
    code = main(["run", str(write_config(tmp_path, stub.base_url)), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1, err
    lines = error_lines(err)
    assert len(lines) == 2, err
    assert lines[0].startswith(f"coevolve run: error: {stub.base_url} refused a prompt longer than its model's "
                               "context"), err
    # a Sample run's i1 prompts show no parents, and no engine was asked: neither is advice
    assert "a served model's --max-model-len" in lines[0] and "eoh.parents" not in lines[0], err
    assert "[model] max_len" not in lines[0], err
    assert lines[1] == (f"every finished step is in {out}: continue with `coevolve run --resume {out}` once its "
                        "server takes longer prompts (--max-model-len); the other changes make a new run, since a "
                        "resume keeps the config the run started with"), err
    assert [e["type"] for e in map(json.loads, (out / "events.jsonl").read_text().splitlines())] == ["start", "step"]

    # the server still refuses: the resume meets the same stop, and its announcement advises nothing
    code = main(["run", "--resume", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert err.splitlines()[0] == f"resuming: {out}", err
    assert "continue a killed run" not in err, err

    stub.mode = "good"  # served with a longer context: the resume goes on from the log
    code = main(["run", "--resume", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert json.loads((out / "summary.json").read_text())["evaluations"] == 4


def test_a_resume_announces_the_directory_without_advising_the_command_just_typed(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: Interrupting())
    out = tmp_path / "run"
    assert main(["run", str(config_file(tmp_path)), "--out", str(out), "--no-progress"]) == 130
    err = capsys.readouterr().err
    assert err.splitlines()[0] == (f"run directory: {out}  (continue a killed run with `coevolve run --resume "
                                   f"{out}`)"), err  # a new run is told how to go on
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: ClosingFakeEngine())
    assert main(["run", "--resume", str(out), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert err.splitlines()[0] == f"resuming: {out}", err
    assert "--resume" not in err, err


class Outgrown(ClosingFakeEngine):
    """The fake engine whose second call's prompts no longer fit its context."""

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        if self.calls:
            raise ContextLengthError("a prompt of 2100 tokens does not fit the engine's context of 2048 tokens "
                                     "(request 0 of the call)", 0)
        return super().chat(conversations, sampling, seeds, constraints)


def test_an_engines_prompt_past_the_context_exits_1_and_says_a_resume_would_stop_again(
        tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: Outgrown())
    out = tmp_path / "run"
    code = main(["run", str(config_file(tmp_path)), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1, err
    lines = error_lines(err)
    assert len(lines) == 2, err
    assert lines[0].startswith("coevolve run: error: a prompt of 2100 tokens does not fit the engine's context"), err
    assert "([model] max_len)" in lines[0] and "eoh.parents" not in lines[0], err
    # [model] max_len is the run's config, which a resume keeps: resuming would stop here again
    assert lines[1] == (f"every finished step is in {out}; a resume keeps the config the run started with and would "
                        "stop here again: make the change in a new run"), err
    assert (out / "events.jsonl").is_file()


@pytest.mark.parametrize("out", ["ro", "ro/skill"])
def test_distill_into_a_read_only_folder_is_refused_before_any_teacher_request(tmp_path, monkeypatch, capsys, out):
    from coevolve.commands import distill as command

    run = whole_run(tmp_path, monkeypatch)
    (tmp_path / "ro").mkdir()
    monkeypatch.setattr(command, "OpenAIGenerator", CountingTeacher)
    monkeypatch.setattr(CountingTeacher, "requests", 0)
    capsys.readouterr()
    read_only(monkeypatch, tmp_path / "ro")
    code = main(["distill", str(run), "--out", str(tmp_path / out), "--endpoint-base-url", "http://127.0.0.1:9/v1",
                 "--endpoint-model", "m", "--no-progress"])
    err = capsys.readouterr().err
    requests = CountingTeacher.requests
    monkeypatch.undo()
    assert code == 2, err
    assert error_lines(err) == [f"coevolve distill: error: --out: cannot write {tmp_path / out / 'SKILL.md'}: "
                                f"{READ_ONLY}; distil into a writable folder"], err
    assert requests == 0
    assert list((tmp_path / "ro").iterdir()) == []


def test_distill_into_a_writable_folder_leaves_only_the_skill(tmp_path, monkeypatch, capsys):
    from coevolve.commands import distill as command

    run = whole_run(tmp_path, monkeypatch)
    monkeypatch.setattr(command, "OpenAIGenerator", CountingTeacher)
    monkeypatch.setattr(CountingTeacher, "requests", 0)
    out = tmp_path / "skills" / "fine"
    code = main(["distill", str(run), "--out", str(out), "--endpoint-base-url", "http://127.0.0.1:9/v1",
                 "--endpoint-model", "m", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    assert CountingTeacher.requests > 0
    assert sorted(p.name for p in (tmp_path / "skills").rglob("*")) == ["SKILL.md", "fine"]
