"""Heuristic runs on a served model (docs/serving.md), against the session's
real vLLM server on loopback: no local engine and nothing of vLLM or torch
imported for context-only methods, the batches the methods really send,
retries that are counted but never charged, a server dying mid-run, and one
clear line for each kind of bad endpoint input."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest_server import DIE_WITH_PARENT, free_port, no_engine_env

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.server

def write_config(tmp_path: Path, base_url: str, model: str, extra: str = "", name: str = "run.toml") -> Path:
    """examples/tsp_aco_eoh.toml with an [endpoint] (the way a user points it at a server)."""
    text = (ROOT / "examples" / "tsp_aco_eoh.toml").read_text()
    path = tmp_path / name
    path.write_text(f'{text}\n[endpoint]\nbase_url = "{base_url}"\nmodel = "{model}"\n{extra}')
    return path


def short_replies(config: Path, max_tokens: int = 32) -> Path:
    """The config with the example's 384-token replies cut to `max_tokens`: for the checks whose claim is the
    requests and their accounting, not what the replies say (suite time: ~44 completion tokens/s on 2 cores)."""
    text = config.read_text()
    assert "max_tokens = 384" in text
    config.write_text(text.replace("max_tokens = 384", f"max_tokens = {max_tokens}", 1))
    return config


def cli(args: list[str], env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "coevolve.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


def read_summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def no_traceback(result: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in result.stderr, result.stderr[-3000:]


class FaultProxy:
    """A loopback proxy in front of the real server that answers chosen chat
    requests with HTTP 503 (the overloaded or dying server a run must survive),
    or replaces one model's replies with prose (a model that cannot code), or pads
    the prompts that hold a text past the server's context, so that the server's
    own refusal comes back (a model with a shorter context)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.fail_first = 0  # the first n chat requests get 503
        self.dead_after: int | None = None  # after n forwarded chat requests, every one gets 503
        self.prose_for: str | None = None  # the server's replies to requests for this model become prose
        self.code_for: tuple[str, str] | None = None  # (model, text): that model's replies become this text
        self.pad_if: str | None = None  # chat requests whose messages hold this text are padded past the context
        self.failed = self.forwarded = 0
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet test output
                pass

            def do_GET(self) -> None:
                proxy.forward(self, None)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                with proxy.lock:
                    chat = self.path.endswith("/chat/completions")
                    fail = chat and (proxy.failed < proxy.fail_first or
                                     (proxy.dead_after is not None and proxy.forwarded >= proxy.dead_after))
                    if fail:
                        proxy.failed += 1
                    elif chat:
                        proxy.forwarded += 1
                if fail:
                    self.reply(503, b'{"error": {"message": "injected: server overloaded", "code": 503}}')
                else:
                    model = json.loads(body).get("model") if chat else None
                    if chat and proxy.pad_if and proxy.pad_if in body.decode():
                        request = json.loads(body)
                        request["messages"][-1]["content"] += " tour" * 2500  # past --max-model-len 2048
                        body = json.dumps(request).encode()
                    text = ("I would rather not write code today." if proxy.prose_for and model == proxy.prose_for
                            else proxy.code_for[1] if proxy.code_for and model == proxy.code_for[0] else None)
                    proxy.forward(self, body, text)

            def reply(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def forward(self, handler, body: bytes | None, text: str | None = None) -> None:
        path = handler.path[len("/v1"):] if handler.path.startswith("/v1") else handler.path
        request = urllib.request.Request(self.upstream + path, data=body, method=handler.command,
                                         headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=600) as response:
                status, payload = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, payload = exc.code, exc.read()
        if text is not None and status == 200:  # the server's own reply, its text replaced
            answer = json.loads(payload)
            answer["choices"][0]["message"]["content"] = text
            payload = json.dumps(answer).encode()
        handler.reply(status, payload)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy(openai_server):
    p = FaultProxy(openai_server.base_url)
    yield p
    p.close()


# ------------------------------------------------------------------ full batches, no engine
def test_eoh_step_and_sample_batch_on_the_endpoint_import_no_engine(openai_server, tmp_path):
    """A full EoH step (10 concurrent ~500-token prompts with per-request seeds)
    and a Sample batch of 20 through [endpoint], in a process where vLLM and
    torch cannot be imported: the recommended CPU server settings serve both."""
    env = no_engine_env(tmp_path)
    # clones rejected, as when the prompt sizes below were measured: scored template copies make the
    # e1 step's parents (and so its prompts) shorter than the ~500 tokens this step is sized for
    config = write_config(tmp_path, openai_server.base_url, openai_server.model, "[context]\nfingerprint = true\n")
    # a quarter of the example's reply length: the batch shapes (10 and 20 requests, ~500-token prompts) are what
    # is served here, and 40 replies of up to 384 tokens cost 2.5 minutes of a 2-core suite (with replies of
    # up to 192 or 128 tokens the e1 prompts below were 372-382 tokens in s57)
    config = short_replies(config, 96)
    eoh_out = tmp_path / "eoh"
    result = cli(["run", str(config), "--budget", "20", "--out", str(eoh_out), "--no-progress"], env)
    assert result.returncode == 0, result.stderr[-3000:]
    no_traceback(result)
    summary = read_summary(eoh_out)
    ledger = summary["ledger"]
    assert summary["evaluations"] == 20 == ledger["llm_requests"]
    # token accounting from the server's usage fields: the step's prompts are the real size
    assert ledger["prompt_tokens"] / ledger["llm_requests"] > 300 and ledger["completion_tokens"] > 0
    events = [json.loads(line) for line in (eoh_out / "events.jsonl").read_text().splitlines()]
    steps = [e for e in events if e["type"] == "step"]
    assert [s["operator"] for s in steps] == ["i1", "e1"] and all(len(s["requests"]) == 10 for s in steps)
    assert len({r["seed"] for s in steps for r in s["requests"]}) == 20  # a seed per request
    # e1's prompts carry its parents, so their size follows what i1 wrote: in bf16 the server's replies depend
    # on how its batches formed (not batch-invariant: results/s37/batch_invariance.txt), and the largest
    # e1 prompt was over 400 tokens in earlier suites, 398 in s38's
    prompt_sizes = [c["prompt_tokens"] for c in steps[1]["completions"]]
    assert max(prompt_sizes) > 300, prompt_sizes
    candidates = [json.loads(line) for line in (eoh_out / "candidates.jsonl").read_text().splitlines()]
    assert {c["model_state"]["kind"] for c in candidates} == {"endpoint"}
    # [sandbox] overlap (on by default): every program the steps scored was started as its reply arrived
    timing = json.loads((eoh_out / "timing.json").read_text())
    assert timing["overlapped"] == ledger["outcomes"]["evaluated"] > 0, (timing, ledger)
    record = json.loads((eoh_out / "endpoint.json").read_text())
    assert record["server"]["id"] == openai_server.model and record["seeds"] == "honoured"

    # the Sample batch: 20 concurrent ~500-token prompts with seeds, which is what crashed the server at prefill;
    # its prompts do not depend on any reply, so short replies serve the same batch shape
    sample_config = tmp_path / "sample.toml"
    sample_config.write_text(config.read_text().replace("max_tokens = 96", "max_tokens = 32", 1))
    assert "max_tokens = 32" in sample_config.read_text()
    sample_out = tmp_path / "sample"
    result = cli(["run", str(sample_config), "--method", "sample", "--budget", "20", "--out", str(sample_out),
                  "--no-progress"], env)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(sample_out)
    assert summary["evaluations"] == 20 == summary["ledger"]["llm_requests"]
    assert "CPU Generator does not use offset" not in openai_server.log.read_text()


def test_ten_distinct_long_seeded_prompts_at_once_are_served(openai_server):
    """The batch shape that crashed vLLM-CPU's server under its default settings
    (docs/serving.md): 10 concurrent, distinct ~500-token prompts (nothing for
    the prefix cache to share), a seed each. The methods' own prompts share a
    long prefix the server caches, so the runs above may not reach it."""
    import numpy as np

    from coevolve.engine.base import Sampling
    from coevolve.engine.openai_client import OpenAIGenerator

    served = OpenAIGenerator(openai_server.base_url, openai_server.model, concurrency=10, retries=0)
    prompts = [[{"role": "user", "content": f"Sum these numbers ({i}): " + " ".join(
        str(n) for n in np.random.default_rng(i).integers(1000, 9999, 110))}] for i in range(10)]
    replies = served.chat(prompts, Sampling(temperature=1.0, max_tokens=16), seeds=list(range(10)))
    assert len(replies) == 10 and all(450 < r.prompt_tokens < 1000 for r in replies), [r.prompt_tokens for r in replies]
    assert sum(r.prompt_tokens for r in replies) > 2048  # more than the server's default prefill chunk


def test_esopt_without_an_engine_is_refused_before_anything_starts(openai_server, tmp_path):
    config = write_config(tmp_path, openai_server.base_url, openai_server.model)
    out = tmp_path / "esopt"
    result = cli(["run", str(config), "--method", "eoh+esopt", "--budget", "20", "--out", str(out)],
                 no_engine_env(tmp_path))
    assert result.returncode == 2
    no_traceback(result)
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert "'eoh+esopt' moves the model's weights (ES)" in line and "pip install 'coevolve[cpu]'" in line
    assert not out.exists()


def test_a_trace2skill_teacher_on_the_endpoint_distils_a_skill_without_an_engine(proxy, tmp_path):
    """Issue 25: eoh+trace2skill with `[skill] teacher = "endpoint"`: the
    analyst requests go to the server (through the counting proxy) in a
    process where vLLM cannot be imported, are charged like candidates, and
    patch a skill version kept in the run directory."""
    config = tmp_path / "t2s.toml"
    config.write_text(
        '[run]\nmethod = "eoh+trace2skill"\ntask = "tsp_construct"\nbudget = 7\nseed = 0\n'
        "[sampling]\nmax_tokens = 48\n[eoh]\npopulation = 3\noffspring = 2\ninit = 3\n"
        '[skill]\nevery = 1\nanalysts = 2\nmax_tokens = 48\nteacher = "endpoint"\n[sandbox]\ntimeout_s = 20\n'
        f'[endpoint]\nbase_url = "{proxy.base_url}"\nmodel = "smollm2-135m"\n')
    out = tmp_path / "t2s"
    result = cli(["run", str(config), "--out", str(out), "--no-progress"], no_engine_env(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    no_traceback(result)
    summary = read_summary(out)
    ledger = summary["ledger"]
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    distills = [e for e in events if e["type"] == "step" and e["operator"] == "distill"]
    assert distills and all(len(e["completions"]) == 2 for e in distills)
    assert all(c["prompt_tokens"] > 0 for e in distills for c in e["completions"])  # the server's usage
    # every request, the analysts' included, reached the server and was charged once
    assert summary["evaluations"] == 7 == ledger["llm_requests"] == proxy.forwarded
    versions = summary["context"]["skill_versions"]
    assert len(versions) == len(distills)
    assert "## Contract" in (out / versions[0]["path"]).read_text()


# ------------------------------------------------------------------ retries and a dying server
def test_retries_are_counted_in_the_ledger_and_never_charged(proxy, tmp_path):
    proxy.fail_first = 3
    config = short_replies(write_config(tmp_path, proxy.base_url, "smollm2-135m", "retries = 2\n"))
    out = tmp_path / "retried"
    result = cli(["run", str(config), "--method", "sample", "--budget", "4", "--out", str(out), "--no-progress"],
                 no_engine_env(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    ledger = read_summary(out)["ledger"]
    assert ledger["llm_retries"] == 3 == proxy.failed
    assert ledger["used"] == 4 == ledger["llm_requests"] == proxy.forwarded  # four candidates, four charges
    assert "3 retried" in result.stdout


def test_a_server_dying_mid_run_leaves_a_resumable_run(proxy, tmp_path):
    proxy.dead_after = 4  # step 0 is served, step 1 finds the server gone
    config = short_replies(write_config(tmp_path, proxy.base_url, "smollm2-135m",
                                        "retries = 1\n[sample]\nbatch = 4\n"))
    out = tmp_path / "dying"
    env = no_engine_env(tmp_path)
    result = cli(["run", str(config), "--method", "sample", "--budget", "8", "--out", str(out), "--no-progress"], env)
    assert result.returncode == 1
    no_traceback(result)
    assert "failed 2 times in a row, last: HTTP 503: injected: server overloaded" in result.stderr
    assert f"coevolve run --resume {out}" in result.stderr
    steps = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert [e["type"] for e in steps] == ["start", "step"]

    proxy.dead_after = None  # the server is back; more retries and time for it, which a resume may change
    saved = out / "config.toml"
    assert "retries = 1\n" in saved.read_text() and "timeout_s = 300.0\n" in saved.read_text()
    saved.write_text(saved.read_text().replace("retries = 1\n", "retries = 4\n")
                     .replace("timeout_s = 300.0\n", "timeout_s = 120.0\n"))
    result = cli(["run", "--resume", str(out), "--no-progress"], env)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(out)
    assert summary["evaluations"] == 8 and proxy.forwarded == 8  # step 0 came from the log, not the server


def test_an_ensemble_spreads_requests_over_its_models_and_prices_each(openai_server, tmp_path):
    """[endpoint] models = {a = w, b = w}: each request goes to the model its seed draws; each
    candidate records the model that wrote it, the spend prices each reply at its own model's
    price, and the run table says what each model proposed."""
    from coevolve.engine.openai_client import OpenAIGenerator

    a, b = openai_server.model, openai_server.alias
    text = (ROOT / "examples" / "tsp_aco_sample.toml").read_text()
    config = tmp_path / "ensemble.toml"
    config.write_text(f'{text}\n[endpoint]\nbase_url = "{openai_server.base_url}"\nmodels = {{ "{a}" = 1.0, '
                      f'"{b}" = 1.0 }}\n[caps]\nmoney = 100.0\nprices = {{ "{a}" = [1.0, 2.0], "{b}" = [10.0, 20.0] }}\n')
    short_replies(config)  # which model each request goes to is the seed's draw, not the reply's
    out = tmp_path / "run"
    result = cli(["run", str(config), "--budget", "8", "--out", str(out), "--no-progress"], no_engine_env(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    candidates = [json.loads(line) for line in (out / "candidates.jsonl").read_text().splitlines()]
    written = [c["model_state"]["model"] for c in candidates]
    assert set(written) == {a, b}, written  # the run's seeds draw both (the same draws every time)
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    replies = [c for e in events if e.get("type") == "step" for c in e["completions"]]
    assert [r["model"] for r in replies] == written  # one reply per candidate here, in order
    generator = OpenAIGenerator(openai_server.base_url, {a: 1.0, b: 1.0})
    prices = {a: (1.0, 2.0), b: (10.0, 20.0)}
    summary = read_summary(out)
    spend = sum(r["prompt_tokens"] * prices[r["model"]][0] + r["completion_tokens"] * prices[r["model"]][1]
                for r in replies) / 1e6
    assert summary["context"]["spend"] == pytest.approx(spend, abs=1e-6)
    proposers = summary["context"]["proposers"]
    assert {m: p["candidates"] for m, p in proposers.items()} == {m: written.count(m) for m in (a, b)}
    assert re.search(rf"proposers\s+{a} {written.count(a)} \(\d+ valid, \d+ success(es)?\), "
                     rf"{b} {written.count(b)} \(\d+ valid, \d+ success(es)?\)",
                     result.stdout), result.stdout
    assert json.loads((out / "endpoint.json").read_text())["models"] == {a: 1.0, b: 1.0}
    assert generator.pick(None) == a


def test_an_adaptive_ensemble_asks_a_model_that_writes_prose_less_through_the_server(proxy, openai_server,
                                                                                     tmp_path):
    """[endpoint] select = "adaptive" through the real server: one model's replies are made prose by the
    proxy, the other's the task's template (the 135M model's own code is valid or not by the luck of the
    server's batching: bf16 on CPU is not batch-invariant, and with no valid reply from either model the
    weights can stay even). Each step's logged weights are the formula over the candidates before it
    (recomputed here), and each request went to the model its seed draws under them. The proxy replaces
    every reply's text, so the server is asked for 16 tokens only (suite time)."""
    from tasks.tsp_aco import TEMPLATE

    a, b = models = (openai_server.model, openai_server.alias)
    proxy.prose_for, proxy.code_for = b, (a, f"{{an even prior}}\n```python\n{TEMPLATE.strip()}\n```")
    config = tmp_path / "adaptive.toml"
    config.write_text(f'''[run]
method = "sample"
task = "tsp_aco"
budget = 12
[sample]
batch = 4
[sampling]
max_tokens = 16
[endpoint]
base_url = "{proxy.base_url}"
models = {{ "{a}" = 1.0, "{b}" = 1.0 }}
select = "adaptive"
''')
    out = tmp_path / "run"
    result = cli(["run", str(config), "--out", str(out), "--no-progress"], no_engine_env(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    candidates = [json.loads(line) for line in (out / "candidates.jsonl").read_text().splitlines()]
    steps = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    steps = [e for e in steps if e.get("type") == "step"]
    assert len(steps) == 3 and all(c["failure"] == "parse" for c in candidates if c["model_state"]["model"] == b)
    assert all(c["objective"] is not None for c in candidates if c["model_state"]["model"] == a)
    for event in steps:
        before = [c for c in candidates if c["step"] < event["step"]]
        raw = {m: (1 + sum(c["objective"] is not None for c in before if c["model_state"]["model"] == m))
               / (2 + sum(c["model_state"]["model"] == m for c in before)) for m in models}
        assert event["weights"] == pytest.approx({m: v / sum(raw.values()) for m, v in raw.items()}, abs=1e-6)
        weights = [event["weights"][m] for m in models]
        drawn = [random.Random(r["seed"]).choices(models, weights=weights)[0] for r in event["requests"]]
        assert drawn == [c["model"] for c in event["completions"]]
    # a valid and b not: after the first step a's weight is above b's whichever model the seeds drew
    assert steps[0]["weights"] == {a: 0.5, b: 0.5} and steps[-1]["weights"][a] > steps[-1]["weights"][b]
    asked_b = sum(c["model_state"]["model"] == b for c in candidates)
    assert asked_b >= 1 and re.search(rf"{b} {asked_b} \(0 valid, 0 successes; next weight 0\.\d\d\)",
                                      result.stdout), result.stdout


# ------------------------------------------------------------------ bad input: one line each
@pytest.mark.parametrize("case", ["unreachable", "wrong model", "key unset", "not openai"])
def test_bad_endpoint_input_is_one_line_before_anything_is_written(openai_server, tmp_path, case):
    base_url, model, extra = openai_server.base_url, openai_server.model, ""
    if case == "unreachable":
        base_url = f"http://127.0.0.1:{free_port()}/v1"
        expected = f"endpoint.base_url: cannot reach {base_url}"
    elif case == "wrong model":
        model = "no-such-model"
        expected = (f"endpoint.model: {base_url} does not serve 'no-such-model'; "
                    f"it serves: {openai_server.model}")
    elif case == "key unset":
        extra = 'api_key_env = "COEVOLVE_TEST_UNSET_KEY"\n'
        expected = "endpoint.api_key_env: the environment variable COEVOLVE_TEST_UNSET_KEY is not set"
    else:
        base_url = base_url[: -len("/v1")]  # the server's root, not its OpenAI API
        expected = f"endpoint.base_url: {base_url}/models not found (HTTP 404); an OpenAI-compatible base_url"
    config = write_config(tmp_path, base_url, model, extra)
    out = tmp_path / "bad"
    env = {**no_engine_env(tmp_path), "COEVOLVE_TEST_UNSET_KEY": ""}
    result = cli(["run", str(config), "--budget", "4", "--out", str(out)], env, timeout=120)
    assert result.returncode == 2
    no_traceback(result)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert not out.exists()


def test_a_constraint_the_server_rejects_fails_at_the_check(openai_server):
    from coevolve.engine.base import Sampling
    from coevolve.engine.base import ConstraintError
    from coevolve.engine.openai_client import OpenAIGenerator

    served = OpenAIGenerator(openai_server.base_url, openai_server.model)
    served.check_constraints([r"[0-9]{3}"])  # a pattern it takes passes
    with pytest.raises(ConstraintError) as failure:  # the in-process engine's error, so callers treat both alike
        served.check_constraints([r"(unclosed"])
    message = str(failure.value)
    assert f"{openai_server.base_url} rejected the decoding constraint '(unclosed' (HTTP 400: " in message
    assert "\n" not in message
    # the same constraint holds in a batch: every reply matches, seeds kept
    replies = served.chat([[{"role": "user", "content": f"Pick a number {i}"}] for i in range(4)],
                          Sampling(temperature=1.0, max_tokens=8), seeds=[1, 2, 3, 4], constraints=[r"[0-9]{3}"] * 4)
    assert all(len(r.text) == 3 and r.text.isdigit() for r in replies), replies


def test_a_prompt_past_the_servers_context_is_a_context_length_error_constrained_or_not(openai_server):
    """A 400 for a prompt the model's context cannot hold is not the constraint's fault (it was once read
    as a rejected constraint, and the run then decoded freely) nor a retry's to fix."""
    from coevolve.engine.base import ContextLengthError, Sampling
    from coevolve.engine.openai_client import OpenAIGenerator

    served = OpenAIGenerator(openai_server.base_url, openai_server.model)
    long = [[{"role": "user", "content": "tour " * 2500}]]  # past the test server's --max-model-len 2048
    for constraints in (None, [r"[0-9]{3}"]):
        with pytest.raises(ContextLengthError) as caught:
            served.chat(long, Sampling(temperature=0.0, max_tokens=8), seeds=[1], constraints=constraints)
        message = str(caught.value)
        assert message.startswith(f"{openai_server.base_url} refused a prompt longer than its model's context "
                                  "(HTTP 400: "), message
        assert "maximum context length" in message and "sampling.max_tokens = 8" in message and "\n" not in message
    # in a call with prompts that fit, the refusal names its request and the others' replies come with it
    # (what a search keeps while it asks again, leaned, for the refused one: loop.py _from_endpoint)
    short = [{"role": "user", "content": "Pick a number"}]
    with pytest.raises(ContextLengthError) as caught:
        served.chat([short, long[0], short], Sampling(temperature=0.0, max_tokens=8), seeds=[1, 2, 3])
    replies = caught.value.replies
    assert caught.value.index == 1 and replies[1] is None, replies
    assert all(r is not None and r.completion_tokens > 0 for r in (replies[0], replies[2])), replies


def test_a_proposal_prompt_the_server_refuses_as_too_long_is_leaned_and_the_run_goes_on(proxy, tmp_path):
    """A prompt that shows the starting skill is padded past the served model's context by the proxy, so the
    server's own 400 comes back: each proposal is leaned (the skill left out, the parts it does not show
    skipped: LEAN, loop.py _from_endpoint) and asked again once, and the run finishes, the refusals counted
    as requests and recorded in the step event."""
    from coevolve.base.skills import write_skill

    folder = write_skill(tmp_path / "hints", "Hints.", "# Hints\n\n## Ideas\n- Visit the nearest city first.\n").path
    proxy.pad_if = "Visit the nearest city first."
    config = write_config(tmp_path, proxy.base_url, "smollm2-135m", f'[skill]\nstart = "{folder}"\n')
    config.write_text(config.read_text().replace("max_tokens = 384", "max_tokens = 96", 1))  # suite time
    out = tmp_path / "r"
    result = cli(["run", str(config), "--method", "sample", "--budget", "3", "--out", str(out), "--no-progress"],
                 no_engine_env(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    no_traceback(result)
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    step = next(e for e in events if e["type"] == "step")
    assert [r.get("lean") for r in step["requests"]] == [3] * 3 and step["refused_long"] == 3, step["requests"]
    summary = read_summary(out)
    assert summary["evaluations"] == 3 and summary["ledger"]["llm_requests"] == 6
    assert summary["context"]["leaned"]["requests"] == 3
    assert all(0 < c["prompt_tokens"] < 2048 for c in step["completions"])


def test_the_test_server_dies_with_the_test_process(tmp_path):
    """The server fixture's launcher (conftest_server.DIE_WITH_PARENT): a parent killed with SIGKILL, which
    skips every teardown, takes its server with it. Here the "server" is a sleep, the parent a Python that
    starts it the fixture's way and prints its pid."""
    import os
    import time

    parent = subprocess.Popen([sys.executable, "-c", (
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', sys.argv[1], str(os.getpid()), '-c',"
        " 'import time; time.sleep(120)'], start_new_session=True)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(120)\n"), DIE_WITH_PARENT], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())

    def alive() -> bool:  # a zombie counts as gone: an init that does not reap would keep it listed
        try:
            return Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (FileNotFoundError, ProcessLookupError):
            return False

    time.sleep(1)  # the launcher armed the signal and became the sleep
    assert alive()  # while its parent is
    parent.kill()
    parent.wait()
    deadline = time.time() + 10
    while alive() and time.time() < deadline:
        time.sleep(0.1)
    if alive():
        os.kill(child, 9)
        raise AssertionError("the child outlived its killed parent")
