"""An [endpoint] that answers HTTP 200 with a body that is no OpenAI chat completion (a proxy's HTML login
page, a body that is not JSON, a completion without choices; s53 walkthrough, finding 1) is a broken
endpoint, not a bad candidate: retried like a 5xx, then one line naming the URL and what came back, and
the run directory resumes, as after an HTTP 500. Replies that are chat completions with useless text
(empty, null content, no usage) stay parse failures of the candidate. A stub server on loopback, the real
CLI path, no engine."""

from __future__ import annotations

import json
from pathlib import Path

import endpoint_stub
import pytest
from endpoint_stub import MODEL, REPLIES, StubServer

from coevolve.cli import main
from coevolve.engine.base import Sampling
from coevolve.engine import openai_client
from coevolve.engine.openai_client import EndpointError, OpenAIGenerator
from tasks.tsp_construct import TEMPLATE

stub, no_key = endpoint_stub.stub, endpoint_stub.no_key  # the stub's fixtures, found here by pytest


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch):
    """Retries here are asked again at once: what is checked is how many tries were made and what the last
    one said, not the pause between them (the clients the commands build back off 1, 2, 4 s by default:
    7 s of sleep for distill's four tries)."""
    monkeypatch.setattr(openai_client, "MAX_BACKOFF_S", 0.0)


def write_config(tmp_path: Path, base_url: str) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(f'[run]\nmethod = "sample"\ntask = "tsp_construct"\nbudget = 4\nseed = 0\n'
                    f'[sample]\nbatch = 2\n[sandbox]\ntimeout_s = 10\n[context]\nconstrain = false\n'
                    f'[endpoint]\nbase_url = "{base_url}"\nmodel = "{MODEL}"\nretries = 1\nconcurrency = 1\n')
    return path


def ask(stub: StubServer, retries: int = 0) -> tuple:
    generator = OpenAIGenerator(stub.base_url, MODEL, retries=retries, backoff_s=0.0)
    return generator.chat([[{"role": "user", "content": "write"}]], Sampling(temperature=0.0, max_tokens=8))[0]


# what the one line says came back, per broken reply
SAID = {
    "nochoices": "HTTP 200 (application/json) is not an OpenAI chat completion (no choices): "
                 '\'{"id": "c", "object": "chat.completion", "model": "stub", "choices": [], "usage"...\'',
    "badjson": "HTTP 200 (application/json) is not an OpenAI chat completion (not JSON): "
               '\'{"id": "c", "choices": [{"message": {"content": "def sel\'',
    "html": "HTTP 200 (text/html; charset=utf-8) is not an OpenAI chat completion (not JSON): "
            "'<html><head><title>Sign in</title></head><body>Please sign in to the corporate p...'",
}


@pytest.mark.parametrize("mode", sorted(SAID))
def test_a_reply_that_is_no_chat_completion_stops_the_run_in_one_line_and_it_resumes(stub, tmp_path, capsys,
                                                                                      mode):
    stub.mode, stub.good_first = mode, 2  # step 0 (two candidates) is answered; step 1 finds the proxy's page
    out = tmp_path / "run"
    code = main(["run", str(write_config(tmp_path, stub.base_url)), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("coevolve run: error:")]
    assert errors == [f"coevolve run: error: {stub.base_url} failed 2 times in a row, last: {SAID[mode]}"], err
    assert f"every finished step is in {out}: continue with `coevolve run --resume {out}`" in err
    assert stub.chats == 4  # two answered, then step 1's first request broken twice (retries = 1); not its second

    stub.mode = "good"  # the proxy lets the requests through again
    code = main(["run", "--resume", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["evaluations"] == 4
    assert stub.chats == 6  # step 0 came from the run directory, not the server


def test_one_broken_reply_is_retried_like_a_5xx_and_counted(stub, tmp_path, capsys):
    stub.mode, stub.good_first, stub.bad_times = "html", 1, 1  # a proxy's hiccup
    out = tmp_path / "run"
    code = main(["run", str(write_config(tmp_path, stub.base_url)), "--out", str(out), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    ledger = json.loads((out / "summary.json").read_text())["ledger"]
    assert ledger["llm_retries"] == 1 and ledger["used"] == 4  # the retry charges no evaluation


@pytest.mark.parametrize("mode", ["list", "nomessage", "numbercontent"])
def test_other_shapes_that_are_no_chat_completion_are_the_endpoints_error(stub, mode):
    stub.mode = mode
    with pytest.raises(EndpointError, match=r"failed 1 times in a row, last: HTTP 200 \(application/json\) is not "
                                            r"an OpenAI chat completion"):
        ask(stub)


def test_chat_completions_with_useless_text_are_still_replies(stub):
    """null or empty content and a missing usage are the model's doing: the candidate pays (parse failure)."""
    for mode in ("null", "empty"):
        stub.mode = mode
        reply = ask(stub)
        assert (reply.text, reply.completion_tokens, reply.finish_reason) == ("", 5, "stop")
    stub.mode = "nousage"
    reply = ask(stub)
    assert TEMPLATE.strip() in reply.text and (reply.prompt_tokens, reply.completion_tokens) == (0, 0)


def distill_run(folder: Path) -> Path:
    from coevolve.search.population import Candidate

    failed = Candidate(id=1, step=1, operator="i1", parents=[], model_state={"kind": "base"},
                       code="def select_next_node(current_node, destination_node, unvisited_nodes, "
                            "distance_matrix):\n    return dist", failure="exception",
                       message="line 2: NameError: name 'dist' is not defined")
    folder.mkdir()
    (folder / "config.toml").write_text('[run]\ntask = "tsp_construct"\nmethod = "eoh"\nbudget = 8\n')
    (folder / "candidates.jsonl").write_text(json.dumps(failed.model_dump(mode="json")) + "\n")
    return folder


@pytest.mark.parametrize("mode", ["nochoices", "html"])
def test_distill_with_an_endpoint_teacher_says_the_same_one_line(stub, tmp_path, capsys, mode):
    stub.mode = mode
    run = distill_run(tmp_path / "r")
    code = main(["distill", str(run), "--out", str(tmp_path / "skill"), "--endpoint-base-url", stub.base_url,
                 "--endpoint-model", MODEL, "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2, err  # as an HTTP 500 ends distill
    assert "Traceback" not in err
    assert err.strip() == f"coevolve distill: error: {stub.base_url} failed 4 times in a row, last: {SAID[mode]}"
    assert not (tmp_path / "skill").exists()


def probed(tmp_path: Path, capsys, models: tuple) -> tuple[StubServer, int, str, Path]:
    """A run against a stub whose `GET /models` answers `models`: (the stub, exit status, stderr, --out)."""
    server = StubServer()
    server.models = models
    try:
        out = tmp_path / "run"
        code = main(["run", str(write_config(tmp_path, server.base_url)), "--out", str(out), "--no-progress"])
    finally:
        server.close()
    return server, code, capsys.readouterr().err, out


def test_a_proxy_page_in_place_of_the_model_list_is_one_line_before_anything_is_written(tmp_path, capsys):
    """A proxy's sign-in page answers the start-up probe (`GET /models`) before any chat request."""
    stub, code, err, out = probed(tmp_path, capsys, REPLIES["html"])
    assert code == 2 and "Traceback" not in err
    assert err.strip() == (f"coevolve run: error: endpoint.base_url: {stub.base_url}/models: HTTP 200 (text/html; "
                           "charset=utf-8) is not an OpenAI model list (not JSON): '<html><head><title>Sign in"
                           "</title></head><body>Please sign in to the corporate p...'; is base_url an "
                           "OpenAI-compatible server (not a proxy's sign-in page)?")
    assert not out.exists() and stub.chats == 0


# s53 walkthrough, finding 2: a `GET /models` answering 200 with JSON that lists no named models (a health
# endpoint on the wrong port, a web UI's API) was a TypeError traceback or "it serves: None"
NO_MODEL_LIST = {
    "status": ('{"status": "ok"}', "no list of models in `data`"),
    "names": ('{"data": [{"name": "x"}]}', "a model in `data` has no `id`"),
    "number ids": ('{"object": "list", "data": [{"id": 7}]}', "a model in `data` has no `id`"),
}


@pytest.mark.parametrize("body", sorted(NO_MODEL_LIST))
def test_json_that_lists_no_named_models_is_one_line_before_anything_is_written(tmp_path, capsys, body):
    stub, code, err, out = probed(tmp_path, capsys, (200, "application/json", NO_MODEL_LIST[body][0]))
    assert code == 2 and "Traceback" not in err
    assert err.strip() == (f"coevolve run: error: endpoint.base_url: {stub.base_url}/models: HTTP 200 "
                           f"(application/json) is not an OpenAI model list ({NO_MODEL_LIST[body][1]}): "
                           f"{NO_MODEL_LIST[body][0]!r}; is base_url an OpenAI-compatible server (not a "
                           "proxy's sign-in page)?")
    assert not out.exists() and stub.chats == 0


def test_distill_asks_the_teacher_for_max_tokens(stub, tmp_path, capsys):
    """`coevolve distill --max-tokens N`: every analyst's request to the teacher carries N (160 when not
    given, the runs' default); N below 1 is refused before any request."""
    run = distill_run(tmp_path / "r")
    asked = []
    for name, flags in (("default", []), ("set", ["--max-tokens", "600"])):
        stub.bodies.clear()
        code = main(["distill", str(run), "--out", str(tmp_path / name), "--endpoint-base-url", stub.base_url,
                     "--endpoint-model", MODEL, "--no-progress", *flags])
        err = capsys.readouterr().err
        assert code == 0, err
        asked.append({body.get("max_tokens", body.get("max_completion_tokens")) for body in stub.bodies})
    assert asked == [{160}, {600}]
    code = main(["distill", str(run), "--out", str(tmp_path / "none"), "--endpoint-base-url", stub.base_url,
                 "--endpoint-model", MODEL, "--no-progress", "--max-tokens", "0"])
    assert code == 2 and capsys.readouterr().err.strip() == "coevolve distill: error: --max-tokens must be >= 1 (got 0)"
