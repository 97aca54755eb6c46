"""An endpoint's replies to the step in progress, kept as they arrive (`answered.jsonl` in the run
directory), so a resume serves them rather than asking again.

A step's replies reach the event log only with its `step` event. A run killed, interrupted or
stopped by an endpoint's failure after some of a step's replies came would ask the whole step again
on resume: a hosted API bills those replies twice, and no cap or ledger counts the first ones. Here
each reply is appended as it arrives (one line: the step, the slot, the request's `reply_key`, the
reply as the event log keeps it) and the file is emptied once the step's event is logged, so it
never holds more than the step in progress. A resumed run reads it once: a request of that step
whose key has a kept reply is answered from it and not sent; a request whose key differs (a prompt
changed since) is asked again. An unreadable line is a reply lost, never a failed resume.

Requests to an endpoint are kept: the search loop's (the proposer's, and the skill analysts' under
`skill.teacher = "endpoint"`) and an agent run's teacher's (its distillations; there "step" is the round the
skill is distilled at, and the file is emptied once the skill's event is logged). The in-process engine
bills nothing and is asked again.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Sequence

from coevolve.base.durable import JsonlWriter
from coevolve.base.sampling import Sampling
from coevolve.engine.base import Completion, ContextLengthError, Generator, Message

ANSWERED = "answered.jsonl"


def reply_key(messages: Sequence[Message], seed: int | None, constraint: str | None, sampling: Sampling,
              model: str | None, base_url: str | None) -> str:
    """sha256 of all that decides a request's reply: what is sent, under which sampling, to which model
    of which server. Timeouts, retries, concurrency and the key's variable may change on resume and
    are not in it."""
    text = json.dumps({"messages": list(messages), "seed": seed, "constraint": constraint,
                       "sampling": asdict(sampling), "model": model, "base_url": base_url}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def completion_record(completion: Completion) -> dict:
    """A reply as the event log (and this file) keeps it: `Completion(**record)` reads it back."""
    return {"text": completion.text, "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion.completion_tokens, "finish_reason": completion.finish_reason,
            "retries": completion.retries, **({"model": completion.model} if completion.model else {})}


def _kept(path: Path, step: int) -> dict[str, list[Completion]]:
    """The replies the file keeps for `step`, by key. Only completed lines count (a torn tail is a write
    that never returned); a line that does not read as an entry is skipped: its request is asked again."""
    try:
        raw = path.read_bytes()
    except OSError:  # missing (no reply kept), or unreadable: nothing is served
        return {}
    kept: dict[str, list[Completion]] = {}
    for line in raw[: raw.rfind(b"\n") + 1].splitlines():
        try:
            entry = json.loads(line)
            reply = Completion(**entry["reply"])
            if entry["step"] != step or not isinstance(entry["key"], str) or not isinstance(reply.text, str):
                continue
        except (ValueError, TypeError, KeyError):  # (json's and UTF-8's errors are ValueErrors)
            continue
        kept.setdefault(entry["key"], []).append(reply)
    return kept


class Answered:
    """The run directory's kept replies: those of `step` (the step a resumed run runs live next) read at
    start, and each new reply appended (`keep`, from the endpoint's threads) until `clear`."""

    def __init__(self, path: Path, step: int) -> None:
        self.path, self.step = path, step
        self.kept = _kept(path, step)
        self.lock = threading.Lock()  # replies arrive on the endpoint's threads
        self.writer: JsonlWriter | None = None
        self.written = path.exists()  # whether clear has a file to empty
        self.ended = False  # closed: a reply an abandoned request thread brings later is not written

    def serve(self, step: int, key: str) -> Completion | None:
        """The kept reply to a request of `step` with this key (each served once), or None."""
        replies = self.kept.get(key) if step == self.step else None
        return replies.pop(0) if replies else None

    def keep(self, step: int, slot: int, key: str, reply: Completion) -> None:
        with self.lock:
            if self.ended:  # the run has let go of its folder (a request in flight at an interrupt answered late)
                return
            if self.writer is None:  # (opening cuts the torn tail of a writer killed mid-line)
                self.writer = JsonlWriter(self.path)
            self.writer.append({"step": step, "slot": slot, "key": key, "reply": completion_record(reply)})
            self.written = True

    def clear(self) -> None:
        """Empty the file: the step's event holds its replies now."""
        with self.lock:
            self.kept = {}
            if self.written:
                if self.writer is not None:
                    self.writer.close()
                self.writer = JsonlWriter(self.path, truncate=True)
                self.written = False

    def close(self) -> None:
        with self.lock:
            self.ended = True
            if self.writer is not None:
                self.writer.close()
                self.writer = None

    def serving(self, endpoint: Generator, step: int, slots: Sequence[int] | None = None) -> Generator:
        """`endpoint` for the calls of `step` (whose requests are these slots; default: their places in
        each call): each request with a kept reply answered from it, the others asked, and their replies
        kept as they arrive."""
        return _Serving(self, endpoint, step, None if slots is None else list(slots))

    def __enter__(self) -> "Answered":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Serving:
    """A Generator: one call's requests answered from the kept replies or asked of the endpoint."""

    streams = True

    def __init__(self, answered: Answered, endpoint: Generator, step: int, slots: list[int] | None) -> None:
        self.answered, self.endpoint, self.step, self.slots = answered, endpoint, step, slots

    def _model(self, seed: int | None) -> str | None:
        pick = getattr(self.endpoint, "pick", None)  # an ensemble's model for this seed
        return pick(seed) if pick is not None else getattr(self.endpoint, "model", None)

    def chat(self, conversations: Sequence[Sequence[Message]], sampling: Sampling, seeds: Sequence[int] | None = None,
             constraints: Sequence[str | None] | None = None,
             on_each: Callable[[int, Completion], None] | None = None) -> list[Completion]:
        base_url = getattr(self.endpoint, "base_url", None)
        keys = [reply_key(c, None if seeds is None else seeds[i], None if constraints is None else constraints[i],
                          sampling, self._model(None if seeds is None else seeds[i]), base_url)
                for i, c in enumerate(conversations)]
        replies: list[Completion | None] = [self.answered.serve(self.step, k) for k in keys]
        for i, reply in enumerate(replies):
            if reply is not None and on_each is not None:  # the path a live reply takes (an early scoring)
                on_each(i, reply)
        asked = [i for i, reply in enumerate(replies) if reply is None]
        if not asked:
            return replies  # type: ignore[return-value]  (every one served)

        def arrived(j: int, reply: Completion) -> None:
            i = asked[j]
            self.answered.keep(self.step, i if self.slots is None else self.slots[i], keys[i], reply)
            if on_each is not None:
                on_each(i, reply)

        streams = getattr(self.endpoint, "streams", False)
        extra: dict[str, Any] = {"on_each": arrived} if streams else {}
        if constraints is not None:
            extra["constraints"] = [constraints[i] for i in asked]
        try:
            got = self.endpoint.chat([conversations[i] for i in asked], sampling,
                                     seeds=None if seeds is None else [seeds[i] for i in asked], **extra)
        except ContextLengthError as exc:
            if exc.replies is None:
                raise
            if not streams:
                for j, reply in enumerate(exc.replies):
                    if reply is not None:
                        arrived(j, reply)
            for j, reply in zip(asked, exc.replies):
                replies[j] = reply
            # by the whole call's places, with the served replies: the caller asks again for the refused alone
            raise ContextLengthError(str(exc), asked[exc.index], exc.tokens, exc.limit, replies=replies,
                                     too_long=[asked[j] for j in exc.too_long], origin=exc.origin) from None
        except Exception as exc:
            if hasattr(exc, "requests_sent"):  # the served ones reached the endpoint too, in an earlier session
                exc.requests_sent += len(conversations) - len(asked)
            raise
        if not streams:
            for j, reply in enumerate(got):
                arrived(j, reply)
        for j, reply in zip(asked, got):
            replies[j] = reply
        return replies  # type: ignore[return-value]
