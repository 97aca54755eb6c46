"""The engine protocols. `Generator`: what every text generator offers, the
in-process engine or an OpenAI-compatible endpoint; search methods and agents
depend on it only, so a fake can stand in for unit tests of search logic.
`WeightEngine`: a generator whose weights ES moves (coevolve.engine.vllm_engine.Engine,
coevolve.engine.pool.EnginePool); the one protocol ESOpt, the search loop and
agent runs ask for.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Protocol, Sequence, runtime_checkable

from coevolve.base.errors import UsageError
from coevolve.base.sampling import Sampling  # noqa: F401  (re-exported: the generator's per-call settings)

Message = dict[str, str]  # {"role": "system"|"user"|"assistant", "content": str}


@dataclass
class Completion:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"
    retries: int = 0  # failed tries before this answer (endpoints); counted by the ledger, never charged
    meta: dict = field(default_factory=dict)
    cached_tokens: int = 0  # prompt tokens whose KV came from the engine's prefix cache (shared_prefixes)
    model: str = ""  # the endpoint model that answered (an ensemble's pick); "" for the local engine


@runtime_checkable
class Generator(Protocol):
    """Batched chat completion. One call = many conversations, generated together.

    `seeds`, when given, has one sampling seed per conversation so that a
    batch is reproducible run to run and its members differ from each other.
    `constraints`, when given, has one regular expression (or None) per
    conversation that the reply must match in full: enforced at decoding time
    (vLLM structured outputs), so a weak model's reply is always well-formed.
    A generator that cannot enforce one raises `ConstraintError`.
    A generator whose replies arrive one by one (an endpoint: `streams = True`)
    also takes `on_each(index, completion)`, called as each reply arrives, so a
    caller can start on it while the rest are generated.
    """

    def chat(
        self,
        conversations: Sequence[Sequence[Message]],
        sampling: Sampling,
        seeds: Sequence[int] | None = None,
        constraints: Sequence[str | None] | None = None,
    ) -> list[Completion]: ...


def shared_prefixes(generator: Generator) -> ContextManager:
    """The generator's `shared_prefixes()` block (calls inside reuse each other's
    prompt prefixes: the in-process engine's prefix cache), or nothing for a
    generator without one (an endpoint's server caches as it sees fit)."""
    share = getattr(generator, "shared_prefixes", None)
    return share() if share is not None else nullcontext()


class ConstraintError(ValueError):
    """A decoding constraint the generator rejects or cannot enforce."""


ENGINE = "engine"  # ContextLengthError.origin of a prompt the in-process engine (or an engine pool's) measured


class ContextLengthError(UsageError):
    """A prompt longer than the engine's context (one line; the caller may say what made it long).
    `index`: the request of the call whose prompt is the longest; `tokens` and `limit`, when the
    engine measured them; `too_long`, from an engine that refuses the whole call: every request it
    measured too long, so a caller can ask again without those; `replies`, from a generator that
    answers requests one by one (an endpoint): each request's reply, None for those refused as too
    long, so a caller can ask again for those alone. `origin`: who refused it, ENGINE or the base_url
    of the endpoint whose server did (a served model's context may grow between sessions, the run's
    [model] max_len may not), set where it is raised and passed on by whoever words it anew (the search
    loop, an agent rollout, an engine pool), never read from the message. (Its attributes survive
    pickling, as an engine pool's actors need.)"""

    def __init__(self, message: str, index: int = 0, tokens: int | None = None, limit: int | None = None,
                 replies: list[Completion | None] | None = None, too_long: Sequence[int] = (),
                 origin: str = ENGINE) -> None:
        super().__init__(message)
        self.index, self.tokens, self.limit, self.replies = index, tokens, limit, replies
        self.too_long = tuple(too_long)
        self.origin = origin

    @classmethod
    def prompt(cls, tokens: int, limit: int, index: int, too_long: Sequence[int] = ()) -> ContextLengthError:
        return cls(f"a prompt of {tokens} tokens does not fit the engine's context of {limit} tokens "
                   f"(request {index} of the call)", index, tokens, limit, too_long=too_long or (index,),
                   origin=ENGINE)

    def shifted(self, offset: int) -> ContextLengthError:
        """The same error for a call of which this one's was the part starting at request `offset`
        (an engine pool splits a call over its engines)."""
        too_long = [i + offset for i in self.too_long]
        if self.tokens is None or self.limit is None:  # a caller's own wording: only the indices move
            return ContextLengthError(str(self), self.index + offset, too_long=too_long, origin=self.origin)
        return ContextLengthError.prompt(self.tokens, self.limit, self.index + offset, too_long)


def _in_call(exc: ContextLengthError, asked: Sequence[int]) -> ContextLengthError:
    """`exc`, raised by a call of the requests `asked` of a larger one, naming its request by its place in
    the larger call."""
    index = asked[exc.index] if 0 <= exc.index < len(asked) else exc.index
    if exc.tokens is None or exc.limit is None:
        return ContextLengthError(str(exc), index, origin=exc.origin)
    return ContextLengthError.prompt(exc.tokens, exc.limit, index)


REFUSED_LONG = "context_length"  # the finish_reason of an empty reply standing in for a prompt refused as too long


def answered_or_empty(chat: Callable[[list[int]], list[Completion]], count: int,
                      none_answered: str) -> list[Completion]:
    """The replies to a call of `count` requests, for callers to whom a missing reply only means
    nothing found (skill analysts): a prompt refused as too long for the model becomes an empty reply
    (finish_reason REFUSED_LONG) and the others stand. `chat(indices)` asks for those requests of the
    call (each keeps its own seed, so its reply does not depend on who else is asked). An endpoint
    answers the others in the same call (`replies`); an engine refuses the whole call naming the
    requests it measured too long (`too_long`), so they are left out and the rest asked again (an
    engine pool names one part's at a time). Every request refused raises, saying `none_answered`."""
    out: list[Completion | None] = [None] * count
    refused: set[int] = set()
    while True:
        asked = [i for i in range(count) if i not in refused]
        try:
            replies: list[Completion | None] = list(chat(asked))
        except ContextLengthError as exc:
            if exc.replies is not None:
                replies = exc.replies
            elif exc.too_long and all(0 <= i < len(asked) for i in exc.too_long):
                refused.update(asked[i] for i in exc.too_long)
                if len(refused) < count:
                    continue
                whole = _in_call(exc, asked)
                raise ContextLengthError(f"{whole}: {none_answered}", whole.index, origin=whole.origin) from None
            else:
                raise
            if not any(replies):
                raise ContextLengthError(f"{exc}: {none_answered}", exc.index, origin=exc.origin) from None
        for i, reply in zip(asked, replies):
            out[i] = reply
        return [c if c is not None else Completion("", finish_reason=REFUSED_LONG) for c in out]


@runtime_checkable
class WeightEngine(Generator, Protocol):
    """Generation plus the weight operations of ES. A member is only a seed:
    its perturbation is regenerated from (seed, parameter name), so updates
    travel as (seeds, coefficients)."""

    device: str  # "cpu" | "cuda": noise streams differ between them
    noise: str  # "full" | "lowrank": how perturbations and apply_update read (seed, coefficient) pairs
    rank: int | None  # the low-rank factors' rank; None in full mode

    def perturbed(self, seed: int, sigma: float) -> ContextManager[None]:
        """Weights θ + σ·ε(seed) inside the block, θ exactly after it."""

    def generate_members(self, jobs: Sequence["MemberJob"]) -> list[list[Completion]]:
        """Each job's conversations under its member's perturbation."""

    def apply_update(self, seeds: Sequence[int], coefficients: Sequence[float], alpha: float) -> None:
        """θ += α/G Σ c_i ε(seed_i), accumulated in fp32."""

    def checksum(self) -> str:
        """A digest of the live weights (replay and pool agreement compare it)."""

    def noise_info(self) -> dict:
        """The noise mode for histories and run summaries: at least `noise`
        and `rank`; in low-rank mode also which parameters it covers and
        freezes (`covered_elements`, `frozen_elements`, `frozen`)."""


def check_requests(conversations: Sequence, seeds: Sequence[int] | None = None,
                   constraints: Sequence[str | None] | None = None) -> None:
    """The one check of a chat call's per-conversation lists; every `chat`
    (and member job) runs it before any work, so a short list fails here
    and not as a misaligned batch later."""
    for name, values in (("seeds", seeds), ("constraints", constraints)):
        if values is not None and len(values) != len(conversations):
            raise ValueError(f"got {len(values)} {name} for {len(conversations)} conversations")


@dataclass(frozen=True)
class MemberJob:
    """One ES member's generation request: perturb by (seed, sigma), then chat."""

    seed: int
    sigma: float
    conversations: Sequence[Sequence[Message]]
    sampling: Sampling
    request_seeds: Sequence[int] | None = None
    constraints: Sequence[str | None] | None = None


def generate_members_sequentially(engine, jobs: Sequence[MemberJob]) -> list[list[Completion]]:
    """Run each member's requests under its perturbation on one engine that
    offers `perturbed(seed, sigma)` and `chat`."""
    results = []
    for job in jobs:
        with engine.perturbed(job.seed, job.sigma):
            # constraints travel only when set: generators that never constrain need not take them
            extra = {} if job.constraints is None else {"constraints": job.constraints}
            results.append(engine.chat(job.conversations, job.sampling, job.request_seeds, **extra))
    return results
