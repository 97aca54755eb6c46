"""Three CLI nits from the s53 walkthroughs (walkthrough_serving.md finding 13, closing_note.md "Left"):

- `coevolve run --resume DIR` announces `resuming: DIR` without advising `coevolve run --resume DIR`, the
  command that was just typed and that a refusal met later would meet again;
- a prompt that outgrew the model's context stops a run whose directory is written: exit 1 (as other stops
  mid-run; 2 is a command refused before anything was written), saying the directory is kept and how to go
  on, with advice only of what the run has (no eoh.parents for a Sample run, the context of the model asked);
- `coevolve distill --out DIR` on a read-only folder is refused before any teacher request, not after;
- `coevolve run --plan` shows the engine layout the run would load ([distributed]: how many engines, Ray or
  not, tensor_parallel_size, device) and warns of a ray:// address that takes no TCP connection (s55
  finding 4), loading no engine.

Real CLI path: a stub server on loopback as the endpoint (tests/endpoint_stub.py), the fake engine where the
CLI builds one (tests/search_fakes.py), the real sandbox on tsp_construct; a read-only folder through
tests/test_write_failures.py's stand-ins (tests may run as root, where chmod does not stop a write)."""

from __future__ import annotations

import json
import socket

import pytest
import endpoint_stub
from conftest_server import free_port

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


def plan_of(tmp_path, capsys, text: str) -> list[str]:
    """`coevolve run CFG --plan`'s stdout lines for the config `text` (exit 0, nothing on stderr)."""
    path = tmp_path / "plan.toml"
    path.write_text(text)
    assert main(["run", str(path), "--plan"]) == 0
    out, err = capsys.readouterr()
    assert err == "", err
    assert not (tmp_path / "runs").exists()  # a plan writes nothing
    return out.splitlines()


SEARCH = '[run]\nmethod = "sample+esopt"\ntask = "tsp_construct"\nbudget = 40\n'


def test_the_plan_warns_of_a_ray_address_that_takes_no_connection(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    port = free_port()  # bound and closed again: nothing listens there
    lines = plan_of(tmp_path, capsys, SEARCH + f'[distributed]\nengines = 2\naddress = "ray://127.0.0.1:{port}"\n')
    assert lines[-2] == (f"  engine: 2 vLLM engines as Ray actors on the Ray cluster at ray://127.0.0.1:{port}; "
                         "tensor_parallel_size 1 each; device: the cluster's GPUs where it has them, else one CPU "
                         "process per engine"), lines
    assert lines[-1].startswith(f"  warning: distributed.address ray://127.0.0.1:{port} is unreachable: a TCP "
                                f"connect to 127.0.0.1:{port} failed ("), lines
    assert lines[-1].endswith("); the run would fail starting its engines"), lines


def test_the_plan_shows_a_reachable_ray_address_without_a_warning(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with socket.create_server(("127.0.0.1", 0)) as head:  # a head that takes connections (never answers)
        port = head.getsockname()[1]
        lines = plan_of(tmp_path, capsys, SEARCH + f'[distributed]\naddress = "ray://127.0.0.1:{port}"\n')
    assert lines[-1].startswith(f"  engine: 1 vLLM engine as Ray actors on the Ray cluster at ray://127.0.0.1:{port}; "
                                "tensor_parallel_size 1 each"), lines
    assert not any("warning" in line for line in lines), lines


def test_the_plan_shows_the_engine_layout_of_each_run_kind(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lines = plan_of(tmp_path, capsys, SEARCH)  # the default: one engine in this process
    assert lines[-1].startswith("  engine: 1 in-process vLLM engine, no Ray; tensor_parallel_size 1; device: "), lines
    local = plan_of(tmp_path, capsys, SEARCH + '[distributed]\nengines = 2\n')
    assert local[-1].startswith("  engine: 2 vLLM engines as Ray actors on a private Ray cluster on 127.0.0.1 "
                                '(distributed.address "local"); tensor_parallel_size 1 each; device: '), local
    served = plan_of(tmp_path, capsys, '[run]\nmethod = "sample"\ntask = "tsp_construct"\nbudget = 4\n'
                                       '[endpoint]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n')
    assert served[-1] == "  engine: none (the [endpoint] answers every request)", served
    agent = plan_of(tmp_path, capsys, '[run]\nmethod = "esopt"\ntask = "sudoku"\nbudget = 24\n'
                                      '[agent]\npopulation = 4\nbatch = 3\n[distributed]\nengines = 2\n')
    assert agent[0].startswith("plan: esopt on sudoku"), agent
    assert agent[-1].startswith("  engine: 2 vLLM engines as Ray actors on a private Ray cluster"), agent
