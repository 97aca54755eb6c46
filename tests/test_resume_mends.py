"""What `coevolve run --resume DIR` says and does in the corners a kill/resume sweep found (/tmp/ks
kill_sweep.md, findings 4, 6, 7 and 9):
- endpoint.api_key_env names where the key is kept, not what the run asks: a resume takes a new one, as it
  takes timeout_s; a moved base_url or another model is refused with the way out saying to serve it again;
- an extension (`--resume DIR --budget N`) of a finished run killed between its config.toml and its
  `extend` event is named as such by a plain resume, with the command that finishes it;
- `--resume DIR --budget N` probes the endpoint before it writes the extension;
- a comparison's folder is named as one, with the command that goes on with it; its runs/ and runs/TASK
  as folders of its arms, with one arm's folder and that command;
- Ctrl-C while a resume probes its endpoint prints the resume line, as a later Ctrl-C does.

The CLI against the endpoint stub (tests/endpoint_stub.py) and the real sandbox on tsp_construct; no engine."""

from __future__ import annotations

import json
import signal
import socket
import threading
from pathlib import Path

import pytest
from endpoint_stub import MODEL, no_key, stub  # noqa: F401  (fixtures)

from coevolve.base.config import dump_toml, read_toml
from coevolve.cli import main
from coevolve.runstore import read_jsonl
from test_endpoint_interrupt import resume_line, write_config


def stopped_run(stub, tmp_path: Path, endpoint: str = "") -> Path:
    """A run whose endpoint stopped answering at its second step (HTTP 500, no retry): step 0 logged."""
    stub.good_first, stub.mode = 2, "e500"
    out = tmp_path / "run"
    config = write_config(tmp_path, stub.base_url, budget=4, batch=2,
                          endpoint=f'model = "{MODEL}"\nretries = 0\n{endpoint}')
    assert main(["run", str(config), "--out", str(out), "--no-progress"]) == 1
    assert [e["type"] for e in read_jsonl(out / "events.jsonl")] == ["start", "step"]
    stub.mode = "good"
    return out


def finished_run(stub, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    config = write_config(tmp_path, stub.base_url, budget=4, batch=2, endpoint=f'model = "{MODEL}"')
    assert main(["run", str(config), "--out", str(out), "--no-progress"]) == 0
    return out


def edit(run: Path, old: str, new: str) -> None:
    text = (run / "config.toml").read_text()
    assert old in text
    (run / "config.toml").write_text(text.replace(old, new))


def files(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".writer.lock"}


def refused(capsys, argv: list[str], folder: Path) -> str:
    """The one error line of `coevolve ARGV`: exit 2, nothing under `folder` changed."""
    capsys.readouterr()
    before = files(folder)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert files(folder) == before, "a refused resume wrote files"
    return err.strip()


# -- 4: api_key_env is transport; base_url and model are where the replies came from -----------------------
def test_a_resume_takes_another_key_variable(stub, tmp_path, capsys, monkeypatch):
    run = stopped_run(stub, tmp_path)
    monkeypatch.setenv("COEVOLVE_TEST_MOVED_KEY", "sk-test")
    edit(run, 'api_key_env = "OPENAI_API_KEY"', 'api_key_env = "COEVOLVE_TEST_MOVED_KEY"')
    capsys.readouterr()
    code = main(["run", "--resume", str(run), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    assert json.loads((run / "summary.json").read_text())["evaluations"] == 4


def test_a_moved_server_or_model_is_refused_saying_to_serve_it_again(stub, tmp_path, capsys):
    run = stopped_run(stub, tmp_path)
    moved = stub.base_url.replace("127.0.0.1", "localhost")
    edit(run, stub.base_url, moved)
    line = refused(capsys, ["run", "--resume", str(run), "--no-progress"], tmp_path)
    assert line.endswith(f'endpoint.base_url was "{stub.base_url}", is now "{moved}"; a run goes on under the config '
                         f'it started with: put back endpoint.base_url = "{stub.base_url}" (the run\'s replies came '
                         "from that server: serve it there again)"), line
    edit(run, moved, stub.base_url)
    edit(run, 'model = "stub"', 'model = "stub2"')
    line = refused(capsys, ["run", "--resume", str(run), "--no-progress"], tmp_path)
    assert line.endswith('put back endpoint.model = "stub" (the run\'s replies came from that model: serve it under '
                         "that name again)"), line


# -- 6: a finished run's extension killed between its config.toml and its event -----------------------------
def test_a_half_done_extension_of_a_finished_run_is_named_with_the_command_that_finishes_it(stub, tmp_path, capsys):
    run = finished_run(stub, tmp_path)
    raw = read_toml(run / "config.toml")
    # what extend leaves when killed after its config write: the raised budget, no `extend` event
    (run / "config.toml").write_text(dump_toml({**raw, "run": {**raw["run"], "budget": 6}}))
    expected = (f"coevolve run: error: {run} ran to run.budget = 4, and its config.toml says 6: an extension to 6 "
                f"evaluations was interrupted: `coevolve run --resume {run} --budget 6` finishes it (or put back "
                "run.budget = 4)")
    assert refused(capsys, ["run", "--resume", str(run)], tmp_path) == expected
    assert refused(capsys, ["run", "--resume", str(run), "--plan"], tmp_path) == expected
    # the way out it names finishes it
    assert main(["run", "--resume", str(run), "--budget", "6", "--no-progress"]) == 0
    assert json.loads((run / "summary.json").read_text())["evaluations"] == 6
    assert [e for e in read_jsonl(run / "events.jsonl") if e["type"] == "extend"] == [
        {"type": "extend", "budget": 6, "from": 4}]


# -- 7: --budget N with the endpoint down changes nothing ---------------------------------------------------
def test_an_extension_probes_the_endpoint_before_it_writes(stub, tmp_path, capsys):
    run = finished_run(stub, tmp_path)
    stub.close()  # the server is gone
    line = refused(capsys, ["run", "--resume", str(run), "--budget", "6", "--no-progress"], tmp_path)
    assert f"endpoint.base_url: cannot reach {stub.base_url}" in line, line
    assert read_toml(run / "config.toml")["run"]["budget"] == 4


# -- 9a: a comparison's folder ------------------------------------------------------------------------------
def comparison(stub, tmp_path: Path) -> Path:
    """A finished comparison of one arm (sample, budget 2) on tsp_construct: its folder."""
    config = tmp_path / "cmp.toml"
    config.write_text(dump_toml({
        "compare": {"methods": ["sample"], "tasks": ["tsp_construct"], "budgets": [2], "seeds": [0]},
        "sample": {"batch": 2, "population": 2}, "sandbox": {"timeout_s": 10, "workers": 1},
        "test": {"limit": 2, "workers": 1}, "context": {"constrain": False},
        "endpoint": {"base_url": stub.base_url, "model": MODEL}}))
    root = tmp_path / "cmp"
    assert main(["compare", str(config), "--out", str(root), "--no-progress"]) == 0
    return root


def test_resuming_a_comparisons_folder_names_the_compare_command(stub, tmp_path, capsys):
    root = comparison(stub, tmp_path)
    expected = (f"coevolve run: error: {root} is a comparison, not a run: rerun `coevolve compare "
                f"{root / 'compare.toml'} --out {root}` to go on with it")
    assert refused(capsys, ["run", "--resume", str(root)], tmp_path) == expected
    assert refused(capsys, ["run", "--resume", str(root), "--plan"], tmp_path) == expected
    # the command it names goes on with the comparison (here: finds it finished)
    assert main(["compare", str(root / "compare.toml"), "--out", str(root), "--no-progress"]) == 0
    assert "finished earlier, skipped" in capsys.readouterr().out


def test_resuming_a_comparisons_runs_folder_names_an_arm_and_the_compare_command(stub, tmp_path, capsys):
    """runs/ and runs/TASK hold the arms, no run: the line names one arm's folder (which resumes) and the
    command that goes on with the comparison, not a folder without config.toml."""
    root = comparison(stub, tmp_path)
    arm = root / "runs" / "tsp_construct" / "sample-b2-s0"
    for folder in (root / "runs", root / "runs" / "tsp_construct"):
        expected = (f"coevolve run: error: {folder} holds arms of the comparison in {root}, not a run: resume one "
                    f"arm (`coevolve run --resume {arm}`) or rerun `coevolve compare {root / 'compare.toml'} "
                    f"--out {root}` to go on with them all")
        assert refused(capsys, ["run", "--resume", str(folder)], tmp_path) == expected
        assert refused(capsys, ["run", "--resume", str(folder), "--plan"], tmp_path) == expected
    assert main(["run", "--resume", str(arm), "--no-progress"]) == 0  # the arm it names is a run (finished)


# -- 9c: Ctrl-C during a resume's endpoint probe ---------------------------------------------------------------
@pytest.mark.parametrize("more", [[], ["--budget", "6"]], ids=["resume", "extension"])
def test_ctrl_c_while_a_resume_probes_prints_the_resume_line(stub, tmp_path, capsys, more):
    """An extension is written after the probe: its resume line is the same command, --budget N included."""
    run = stopped_run(stub, tmp_path)
    config = (run / "config.toml").read_bytes()
    port = int(stub.base_url.rsplit(":", 1)[1].split("/")[0])
    stub.close()
    # a server that takes the probe's connection and never answers; the Ctrl-C comes while it waits, to the
    # main thread as a terminal's would
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen()
    held: list[socket.socket] = []

    def hold() -> None:
        connection, _ = listener.accept()
        held.append(connection)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    capsys.readouterr()
    try:
        code = main(["run", "--resume", str(run), "--no-progress", *more])
    finally:
        signal.signal(signal.SIGINT, previous)
        thread.join(timeout=5)
        for connection in held:
            connection.close()
        listener.close()
    err = capsys.readouterr().err
    assert held, "the resume never probed its endpoint"
    assert code == 130, err
    again = f"{resume_line(run)[:-1]} {' '.join(more)}`" if more else resume_line(run)
    assert err.strip().splitlines() == ["interrupted", again], err
    assert (run / "config.toml").read_bytes() == config
    assert [e["type"] for e in read_jsonl(run / "events.jsonl")] == ["start", "step"]
