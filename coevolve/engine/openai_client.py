"""The `Generator` protocol over any OpenAI-compatible endpoint (a vLLM server,
a hosted API): the `[endpoint]` next to the engine ES moves (it answers
base-weight requests in heuristic runs and distils skills in agent runs).

Nothing here imports vLLM or torch: a context-only run against an endpoint
needs only the `openai` package (docs/serving.md).

Failures come out as one line, never as an SDK traceback:
- `EndpointConfigError` (a UsageError, exit 2) before any work: the base_url
  does not answer, the model is not served there, the API key variable is
  unset or refused, `/models` answers no model list (`probe`, run once at
  start).
- `ConstraintError` (as the in-process engine raises it): the server rejects
  a decoding constraint (HTTP 400/422; `check_constraints` asks up front) or
  answers without honouring it (every constrained reply is checked).
- `ContextLengthError` (as the in-process engine raises it): the server refused
  a prompt longer than its model's context (HTTP 400 saying so), whether or
  not the request carried a constraint; no retry can fix it. It comes once the
  whole call is answered and holds the other requests' replies (a search leans
  the refused prompts and asks again for those alone); its `origin` is the
  base_url.
- `EndpointError` during a run: the server stopped answering after
  `retries` tries. The run directory keeps every finished step (resume it).
  An HTTP 200 whose body is no OpenAI chat completion (a proxy's HTML login
  page, a body that is not JSON, no choices) is the endpoint's failure, not a
  bad candidate: retried as a 5xx is, then this error, naming what came back
  (`chat_reply`, the one place a reply's shape is checked). A completion whose
  text is useless (empty, null, not code) is the candidate's parse failure.
Retries (connection errors, timeouts, 429, 5xx, broken replies) back off
exponentially and are counted on the completion (`Completion.retries`, summed
by the ledger); they never charge the evaluation budget, which counts
candidates.
A KeyboardInterrupt (Ctrl-C; SIGTERM, which coevolve/cli.py takes as one) leaves
`chat` at once: the call's queued requests are never sent, those in flight are
abandoned to daemon threads that do not hold the process (`chat` says why).
So does the first request of a call that fails for good (any error but a
too-long prompt's): `chat` raises that error at once, sends none of the call's
queued requests and waits for none in flight (their replies would be thrown
away, yet each would be waited for, maybe timed out, and paid for).
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import urlparse

from coevolve.base.durable import atomic_write_json
from coevolve.base.errors import UsageError
from coevolve.base.sections import EndpointSection
from coevolve.engine.base import check_requests, Completion, ConstraintError, ContextLengthError, Message, Sampling

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
PROBE_TIMEOUT_S = 15.0
MAX_BACKOFF_S = 30.0
SHOWN_CHARS = 80  # of a broken reply's body, in the one line that names it


class EndpointConfigError(UsageError):
    """The endpoint cannot serve this run as configured; the message names the field."""


class EndpointError(RuntimeError):
    """The endpoint stopped answering mid-run (after its retries). `timed_out`: its last try got no answer
    within `timeout_s` (a server that is up but slow: a longer timeout, not waiting, is the way on)."""

    def __init__(self, message: str, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class BrokenReply(ValueError):
    """An HTTP 200 whose body is not what the OpenAI API answers; the message says what came back."""


@dataclass(frozen=True)
class ChatReply:
    """What a run reads of a chat completion: its first choice's text and finish reason, and its usage."""

    text: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int


def _came_back(response: Any, why: str, expected: str = "an OpenAI chat completion") -> BrokenReply:
    """`HTTP 200 (text/html) is not an OpenAI chat completion (not JSON): '<html>...'`: one line (the body's
    whitespace folded, its start quoted) that tells a proxy's page from a server's bug."""
    content_type = response.headers.get("content-type") or "no content type"
    body = " ".join(response.text.split())
    shown = body[:SHOWN_CHARS] + ("..." if len(body) > SHOWN_CHARS else "")
    return BrokenReply(f"HTTP {response.status_code} ({content_type}) is not {expected} ({why}): {shown!r}")


def _json_body(response: Any, expected: str) -> Any:
    # the SDK would hand back an HTML page as a str, or raise JSONDecodeError, instead of saying what came back
    response.read()
    try:
        return json.loads(response.text)
    except ValueError:
        raise _came_back(response, "not JSON", expected) from None


def _tokens(usage: Any, key: str) -> int:
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def chat_reply(response: Any) -> ChatReply:
    """The chat completion in an HTTP response (an httpx.Response with status 200), or BrokenReply when the
    body is none (not JSON, no choices, a choice without a message, content that is not text). Null or empty
    content and a missing usage are kept (`""`, 0 tokens): the model's failure, which the candidate pays."""
    body = _json_body(response, "an OpenAI chat completion")
    if not isinstance(body, dict):
        raise _came_back(response, "not a JSON object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise _came_back(response, "no choices")
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        raise _came_back(response, "its choice holds no message")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise _came_back(response, "its message's content is not text")
    finish = choices[0].get("finish_reason")
    usage = body.get("usage")
    return ChatReply(text=content or "", finish_reason=finish if isinstance(finish, str) else None,
                     prompt_tokens=_tokens(usage, "prompt_tokens"),
                     completion_tokens=_tokens(usage, "completion_tokens"))


def model_list(response: Any) -> list[dict]:
    """The models a `GET /models` response lists, or BrokenReply when its body is no model list (a
    proxy's login page answers the probe first)."""
    body = _json_body(response, "an OpenAI model list")
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list) or not all(isinstance(entry, dict) for entry in data):
        raise _came_back(response, "no list of models in `data`", "an OpenAI model list")
    # a model without a name would be listed as "it serves: None" (s53 walkthrough, finding 2)
    if not all(isinstance(entry.get("id"), str) and entry["id"] for entry in data):
        raise _came_back(response, "a model in `data` has no `id`", "an OpenAI model list")
    return data


def is_loopback(base_url: str) -> bool:
    host = (urlparse(base_url).hostname or "").lower()
    return host in ("localhost", "::1") or host.startswith("127.")


_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*|[a-z_][a-z0-9_]*")  # the shapes variable names are written in


def looks_like_key(name: str) -> bool:
    """A value of api_key_env that is more likely the key itself than a variable's name (pasted in the
    wrong place): the error must not print it, as logs and terminals are shared."""
    return name.startswith("sk-") or not _ENV_NAME.fullmatch(name) and (len(name) >= 20 or "-" in name)


def api_key(base_url: str, api_key_env: str) -> str:
    """The key in `api_key_env`. A server on loopback takes any key when the
    default variable is unset (vLLM started without --api-key); anywhere else,
    or when the config names its own variable, an unset one is a config error."""
    key = os.environ.get(api_key_env, "")
    if key:
        return key
    if is_loopback(base_url) and api_key_env == DEFAULT_KEY_ENV:
        return "EMPTY"  # the SDK insists on some key
    if looks_like_key(api_key_env):
        raise EndpointConfigError("endpoint.api_key_env names an environment variable; the value given looks like "
                                  "a key itself (not shown): export the key in a variable and name that")
    raise EndpointConfigError(f"endpoint.api_key_env: the environment variable {api_key_env} is not set; "
                              f"export the API key of {base_url} in it (or name another variable)")


def _status_line(exc: Any) -> str:
    """`HTTP 503: message`, the server's own words cut to one line."""
    body = getattr(exc, "body", None)  # the SDK keeps the JSON error object here
    words = body.get("message") if isinstance(body, dict) and body.get("message") else getattr(exc, "message", exc)
    message = " ".join(str(words).split())
    return f"HTTP {getattr(exc, 'status_code', '?')}: {message[:300]}"


def _too_long(exc: Any) -> bool:
    """A 400 that says the prompt and max_tokens outgrow the model's context (OpenAI's code; vLLM's
    and most servers' wording)."""
    body = getattr(exc, "body", None)
    code = body.get("code") if isinstance(body, dict) else None
    return code == "context_length_exceeded" or "maximum context length" in _status_line(exc).lower()


def _retry_after(exc: Any) -> float | None:
    response = getattr(exc, "response", None)
    value = None if response is None else response.headers.get("retry-after")
    try:
        return None if value is None else min(float(value), MAX_BACKOFF_S)
    except ValueError:
        return None


class OpenAIGenerator:
    def __init__(
        self,
        base_url: str,
        model: str | Mapping[str, float],
        api_key_env: str = DEFAULT_KEY_ENV,
        concurrency: int = 8,
        timeout_s: float = 300.0,
        retries: int = 3,
        backoff_s: float = 1.0,
    ) -> None:
        from openai import OpenAI  # heavy, only when an endpoint is used

        if not base_url:
            raise EndpointConfigError("endpoint.base_url must not be empty")
        if not model:
            raise EndpointConfigError("endpoint.model must not be empty")
        # one model, or an ensemble {name: weight} (each request draws one from its own seed)
        self.models = {model: 1.0} if isinstance(model, str) else {str(k): float(v) for k, v in model.items()}
        self.model = next(iter(self.models))  # the first: unseeded requests (the constraint check) go to it
        self.weights = dict(self.models)  # what requests are drawn by now (`reweight`)
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.concurrency = max(1, concurrency)
        self.retries = retries
        self.backoff_s = backoff_s
        self.served: dict[str, dict] = {}  # what `GET /models` said of each model (probe)
        # the SDK's own retries are off: ours are counted (see the module doc)
        self.client = OpenAI(base_url=self.base_url, api_key=api_key(base_url, api_key_env), timeout=timeout_s,
                             max_retries=0)

    # ------------------------------------------------------------ start-up checks
    def probe(self) -> dict:
        """One `GET /models`: the server answers, takes the key and serves
        `model`. Returns what it says of the model (id, owned_by, max_model_len)."""
        import openai  # heavy, only when an endpoint is used

        try:
            served = model_list(self.client.with_options(timeout=PROBE_TIMEOUT_S).models.with_raw_response.list()
                                .http_response)
        except BrokenReply as exc:
            raise EndpointConfigError(f"endpoint.base_url: {self.base_url}/models: {exc}; is base_url an "
                                      "OpenAI-compatible server (not a proxy's sign-in page)?") from None
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            cause = exc.__cause__ or exc
            raise EndpointConfigError(f"endpoint.base_url: cannot reach {self.base_url} "
                                      f"({' '.join(str(cause).split())[:200]}); is the server running?") from None
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise EndpointConfigError(f"endpoint.api_key_env: {self.base_url} refused the key in "
                                      f"{self.api_key_env} ({_status_line(exc)})") from None
        except openai.NotFoundError:
            raise EndpointConfigError(f"endpoint.base_url: {self.base_url}/models not found (HTTP 404); an "
                                      "OpenAI-compatible base_url usually ends in /v1") from None
        except openai.APIStatusError as exc:
            raise EndpointConfigError(f"endpoint.base_url: {self.base_url}/models answered {_status_line(exc)}") from None
        except openai.OpenAIError as exc:  # any other failure of the SDK's (the body is read by model_list)
            raise EndpointConfigError(f"endpoint.base_url: {self.base_url} is not an OpenAI-compatible "
                                      f"endpoint ({' '.join(str(exc).split())[:200]})") from None
        found = {e["id"]: e for e in served}
        names = ", ".join(sorted(found)[:10]) or "nothing"
        for model in self.models:
            if model not in found:
                field = "endpoint.model" if len(self.models) == 1 else f"endpoint.models.{model}"
                raise EndpointConfigError(f"{field}: {self.base_url} does not serve {model!r}; it serves: {names}")
        # every model's: an ensemble's endpoint.json describes each (describe)
        self.served = {model: {k: found[model].get(k) for k in ("id", "owned_by", "max_model_len")}
                       for model in self.models}
        return self.served[self.model]

    def pick(self, seed: int | None) -> str:
        """The model a request goes to: an ensemble's draw from the request's seed under the current
        weights (the first model for an unseeded request), so a resumed run, which replays its seeds and
        sets the same weights, asks the same models."""
        if len(self.models) == 1 or seed is None:
            return self.model
        return random.Random(seed).choices(list(self.weights), weights=list(self.weights.values()))[0]

    def reweight(self, weights: Mapping[str, float]) -> None:
        """Draw the next requests by these weights (an adaptive ensemble's, coevolve/search/ensemble.py)."""
        if set(weights) != set(self.models) or min(weights.values()) <= 0:
            raise ValueError(f"weights must be > 0 for exactly the ensemble's models {sorted(self.models)}")
        self.weights = {name: float(weights[name]) for name in self.models}

    def check_constraints(self, patterns: Sequence[str]) -> None:
        """One one-token constrained request per distinct pattern, so a server
        that rejects the constraint raises ConstraintError (one line) here,
        before any work, as the in-process Engine's check does."""
        for pattern in dict.fromkeys(patterns):
            self._one([{"role": "user", "content": "ok"}], Sampling(temperature=0.0, max_tokens=1), None, pattern)

    def describe(self, probed: dict | None = None) -> dict:
        """What a run records about its endpoint (run dir endpoint.json): `model` and `server` (what `probe`
        returned) are the first model's, the one unseeded requests go to; an ensemble adds `models`, each
        model's weight, and `servers`, what `/models` said of each (when probed)."""
        probed = probed or {}
        servers = self.served if probed and len(self.models) > 1 else {}
        vllm = all(p.get("owned_by") == "vllm" for p in (servers or {self.model: probed}).values())
        return {"base_url": self.base_url, "model": self.model, "server": probed,
                **({"models": self.models} if len(self.models) > 1 else {}),
                **({"servers": servers} if servers else {}),
                # vLLM honours per-request seeds; the OpenAI API calls its seed best effort
                "seeds": "honoured" if vllm else "sent; best effort (the server does not promise them)",
                "constraints": "vllm structured_outputs regex" if vllm else "sent as vLLM's structured_outputs; "
                               "checked on every reply",
                "retries": self.retries}

    # ------------------------------------------------------------------ generation
    streams = True  # replies arrive one by one: chat takes on_each (coevolve/engine/base.py)

    def chat(
        self,
        conversations: Sequence[Sequence[Message]],
        sampling: Sampling,
        seeds: Sequence[int] | None = None,
        constraints: Sequence[str | None] | None = None,
        on_each: Callable[[int, Completion], None] | None = None,
    ) -> list[Completion]:
        """`constraints` go to the server as vLLM's `structured_outputs`
        request field; a reply that does not match its pattern (a server that
        ignored the field) raises ConstraintError rather than pass unchecked.
        `on_each(index, completion)` is called, from the request's thread, as
        each reply arrives (what the search scores early, coevolve/search/overlap.py).
        A prompt the server refuses as too long raises ContextLengthError once every
        request is answered, naming the first refused (`index`) and holding all the
        replies (`replies`, None where refused). Any other failure (retries spent, a refusal no retry
        fixes, an error raised by on_each) is raised as soon as it happens: the first one, not a later
        one, and the call's other requests are dropped as on an interrupt (see below)."""
        check_requests(conversations, seeds, constraints)
        if not conversations:
            return []  # no worker would ever say it is done
        jobs = [(list(c), None if seeds is None else int(seeds[i]), None if constraints is None else constraints[i])
                for i, c in enumerate(conversations)]

        # Our own daemon threads, not a ThreadPoolExecutor (s53 walkthrough, finding 1). On Ctrl-C or SIGTERM
        # (KeyboardInterrupt in the main thread, which waits on `over` below) the call leaves at once: requests
        # not yet begun are never sent (`abandoned`: a hosted API would charge them, and a resume asks them
        # again) and those in flight are abandoned, not awaited. A daemon thread blocked in an HTTP read does
        # not hold the process, whose exit closes its sockets (so a server may drop the request), so the
        # run's writer lock goes with it. An executor cannot do this: `with` waits for every queued request,
        # concurrent.futures' atexit hook joins its workers even after shutdown(cancel_futures=True), and
        # nothing stops a thread blocked in a read. Nor does closing the httpx client from this thread: it
        # does not reliably wake a read in another thread, and it would leave the client unusable.
        # Uninterrupted, it is what the executor did: up to `concurrency` requests at once, taken in order.
        # The first request that fails for good abandons the call the same way: the error is final for the
        # whole call, so sending or awaiting the rest would only cost time and money for replies thrown away.
        outcomes: list[tuple[Completion | None, BaseException | None]] = [(None, None)] * len(jobs)
        order = iter(range(len(jobs)))
        taking = threading.Lock()
        abandoned = threading.Event()
        failed: list[BaseException] = []  # the first final failure; those it causes (abandoned retries) come later
        over = threading.Event()  # every worker is done, or one failed for good
        running = [min(self.concurrency, len(jobs))]
        sent = [0]  # requests taken by a worker: sent, or about to be

        def fail(exc: BaseException) -> None:
            with taking:
                if not failed:
                    # how many of the call's requests were sent (they may be billed): a caller that goes on
                    # past the error (a rejected constraint) counts these, not the call's length
                    exc.requests_sent = sent[0]  # type: ignore[attr-defined]
                    failed.append(exc)
                abandoned.set()
            over.set()

        def work() -> None:
            try:
                while not abandoned.is_set():
                    with taking:
                        index = next(order, None)
                        sent[0] += index is not None
                    if index is None:
                        return
                    try:
                        completion = self._one(jobs[index][0], sampling, jobs[index][1], jobs[index][2], abandoned)
                        if on_each is not None and not abandoned.is_set():  # the step that hooked it is gone
                            on_each(index, completion)
                        outcomes[index] = (completion, None)
                    except ContextLengthError as exc:  # the others' replies are still wanted (raised below)
                        outcomes[index] = (None, exc)
                    except BaseException as exc:
                        fail(exc)
            finally:
                with taking:
                    running[0] -= 1
                    if running[0] == 0:
                        over.set()

        workers = [threading.Thread(target=work, name=f"endpoint-{n}", daemon=True) for n in range(running[0])]
        try:
            for worker in workers:
                worker.start()
            over.wait()  # interruptible, as join is
        except BaseException:
            abandoned.set()
            raise
        if failed:
            raise failed[0]
        # a prompt too long for the served model refuses that request alone: the others' replies (paid
        # for) travel with the error, so the caller asks again for the refused ones only
        replies: list[Completion | None] = []
        refused: ContextLengthError | None = None
        for index, (completion, error) in enumerate(outcomes):
            if error is not None:  # only a ContextLengthError is kept in outcomes
                replies.append(None)
                refused = refused or ContextLengthError(str(error), index, origin=error.origin)
            else:
                replies.append(completion)
        if refused is not None:
            refused.replies = replies
            raise refused
        return replies  # type: ignore[return-value]  (no None without a refusal)

    def _request(self, messages: list[Message], sampling: Sampling, seed: int | None,
                 pattern: str | None) -> dict:
        kwargs: dict[str, Any] = dict(model=self.pick(seed), messages=messages, temperature=sampling.temperature,
                                      top_p=sampling.top_p, max_tokens=sampling.max_tokens)
        if sampling.stop:
            kwargs["stop"] = list(sampling.stop)
        if sampling.presence_penalty:
            kwargs["presence_penalty"] = sampling.presence_penalty
        if seed is not None:
            kwargs["seed"] = seed
        extra: dict[str, Any] = {}
        if sampling.top_k != -1:
            extra["top_k"] = sampling.top_k  # vLLM's extension of the OpenAI API
        if pattern is not None:
            extra["structured_outputs"] = {"regex": pattern}
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    def _one(self, messages: list[Message], sampling: Sampling, seed: int | None,
             pattern: str | None = None, abandoned: threading.Event | None = None) -> Completion:
        from openai import APIConnectionError, APIStatusError, APITimeoutError  # heavy, only when an endpoint is used

        kwargs = self._request(messages, sampling, seed, pattern)
        attempt = 0
        while True:
            try:
                # the raw response: its body's shape is checked here (chat_reply), not trusted to the SDK
                reply = chat_reply(self.client.chat.completions.with_raw_response.create(**kwargs).http_response)
                break
            except BrokenReply as exc:  # a proxy's hiccup or a broken server, as a 5xx is: asked again
                failure, wait, timed_out = str(exc), None, False
            except (APIConnectionError, APITimeoutError) as exc:
                failure, wait = f"no answer ({' '.join(str(exc.__cause__ or exc).split())[:200]})", None
                timed_out = isinstance(exc, APITimeoutError)
            except APIStatusError as exc:
                if exc.status_code == 400 and _too_long(exc):  # not the constraint's fault, nor a retry's to fix
                    raise ContextLengthError(f"{self.base_url} refused a prompt longer than its model's context "
                                             f"({_status_line(exc)}; servers that do not shorten replies to fit "
                                             f"count sampling.max_tokens = {sampling.max_tokens} too)",
                                             origin=self.base_url) from None
                if pattern is not None and exc.status_code in (400, 422):
                    raise ConstraintError(f"{self.base_url} rejected the decoding constraint {pattern!r} "
                                          f"({_status_line(exc)})") from None
                if exc.status_code != 429 and exc.status_code < 500:
                    raise EndpointError(f"{self.base_url} refused a request ({_status_line(exc)})") from None
                failure, wait, timed_out = _status_line(exc), _retry_after(exc), False
            if attempt == self.retries:
                raise EndpointError(f"{self.base_url} failed {attempt + 1} times in a row, last: {failure}",
                                    timed_out) from None
            pause = wait if wait is not None else min(self.backoff_s * 2**attempt, MAX_BACKOFF_S)
            if abandoned is None:
                time.sleep(pause)
            elif abandoned.wait(pause):  # the call was interrupted: its retry is never sent
                raise EndpointError(f"{self.base_url}: request abandoned (interrupted)")
            attempt += 1
        text = reply.text
        # a length-cut reply is a prefix of a match, not a match
        if pattern is not None and reply.finish_reason != "length" and re.fullmatch(pattern, text, re.DOTALL) is None:
            raise ConstraintError(f"{self.base_url} ignored the decoding constraint {pattern!r} (reply {text[:80]!r}); "
                                  "use a vLLM server, or run without constrained actions")
        return Completion(
            text=text,
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
            finish_reason=reply.finish_reason or "stop",
            retries=attempt,
            model=kwargs["model"],
        )


ENDPOINT_RECORD = "endpoint.json"  # in a run directory: what the run's endpoint was (OpenAIGenerator.describe)


def record_endpoint(run_dir: str | Path, described: dict | None) -> None:
    """Write what a run's endpoint was into its directory (nothing without an endpoint)."""
    if described is not None:
        atomic_write_json(Path(run_dir) / ENDPOINT_RECORD, described)


def open_endpoint(section: EndpointSection) -> OpenAIGenerator | None:
    """The configured `[endpoint]`, or None when the engine does everything."""
    if not section.base_url:
        return None
    return OpenAIGenerator(section.base_url, section.choices, api_key_env=section.api_key_env,
                           concurrency=section.concurrency, timeout_s=section.timeout_s, retries=section.retries)
