"""The co-evolution loop: prompt-space steps and ES weight generations over one
evaluation budget.

Each step of the method's plan: pick parents, build prompts, generate (base
weights, or one perturbed model per ES member), extract code, charge the
ledger, score in the sandbox, update the population, and for perturbed steps
turn the candidates' rewards into one ES update.

Determinism and resume: every random choice is derived from (run seed, step,
slot), so a run is a pure function of its config. Each completed step is one
line of events.jsonl holding the texts, results and ES rewards. Resuming
re-runs the plan from the start, serving logged steps from the log instead of
the generator and sandbox, restores the weights with ESOpt.resume, and goes on
live: the summary equals that of an uninterrupted run and nothing is charged
twice. The step's event is written before its ES update, so an update lost to
a kill is re-applied from the logged rewards.

Context that learns ([context], [skill]; docs/search.md): each request may
carry a recent failure (a parent's failed child first), `repair` requests
carry a failed candidate and its error, the reply is decoded under a pattern
that forces the template's exact `def` line, clones (rename-invariant
fingerprints) of earlier candidates and of the template are rejected before
the sandbox, and +trace2skill methods refresh a SKILL.md from the run's own
candidates in "distill" steps of the plan. With context.seed_template the
archive starts with the task's template as candidate 0, scored once through
the candidates' sandbox path and logged as a "seed" event (a resumed run
restores it from there); it is not a proposal, so it is neither charged nor an
LLM request (the ledger counts it as `seeded`). All of it is derived from
logged data, so it replays identically. Caps ([caps]) end a run cleanly at a step
boundary; raising them in config.toml and resuming goes on.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import pickle
import random
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, Sequence

import numpy as np

from coevolve.base.config import as_dict, dump_toml
from coevolve.base.durable import atomic_write_bytes, read_json, read_jsonl
from coevolve.base.records import Evaluation, SearchSummary, write_record
from coevolve.base.sampling import Sampling
from coevolve.base.skills import load_skill, parse_skill_text
from coevolve.codeparse import (CUT_OFF, NO_CODE, NO_CODE_CUT_OFF, Extracted, answer_pattern, extract,
                                template_signature)
from coevolve.engine.base import (Completion, ConstraintError, ContextLengthError, Generator, MemberJob, Message,
                                  WeightEngine, answered_or_empty)
from coevolve.es import Member
from coevolve.es.start import HEURISTIC, ResumeError, check_same_config, logged_config, start_es, start_event
from coevolve.sandbox.results import EvalResult
from coevolve.runstore import (PROMPTS, JsonlWriter, RunStore, atomic_write_json, atomic_write_text, ended,
                               kept_best_code, scored_candidates)
from coevolve.search import cascade, ensemble
from coevolve.search.answered import ANSWERED, Answered, completion_record
from coevolve.search.ledger import Ledger
from coevolve.search import skill as skills
from coevolve.search.feedback import parent_note
from coevolve.search.edits import WHOLE, EditError, edit_pattern, edited
from coevolve.search.fingerprint import CloneIndex, fingerprint
from coevolve.base.errors import CorruptFileError, UsageError, plural, word_cut
from coevolve.search import operators
from coevolve.search.overlap import Overlap
from coevolve.search.methods import (BUILTIN, DISTILL, Method, StepSpec, es_population, make_method, members_for,
                                     parse_name, planned_es_generations, planned_steps, step_count,
                                     taken_counts)
from coevolve.search.plot import best_so_far, plot_run_progress
from coevolve.search.population import Candidate, dedup_key
from coevolve.search.prompts import Context, describe_failure, instructions as prompt_instructions, operator_messages
from coevolve.search.reward import candidate_reward, median, member_rewards
from coevolve.search.runconfig import RunConfig
from coevolve.search.skill_versions import SkillVersions
from coevolve.search.start_programs import START_OPERATOR, read_programs
from tasks.base import mean_profile, starting_program, template_runs
from tasks.check import checked_reference
from tasks.loader import _split_file, guarded, raised_in

EVENT_VERSION = 1
# Rules changed since EVENT_VERSION 1 began, written in the start event (`rules`): a run whose start event
# lacks one was proposed under the rule before it, and its logged steps replay (_check_logged) only under
# that, so a resume keeps it. judged_generations: a judged trial's ES generations alternate from the
# trial's first (before: from the run's first). analyst_cases: a refresh's success analysts skip programs
# that only equal the template and those the previous refresh read, where others exist.
RULES = {"judged_generations": "from_trial", "analyst_cases": "past_echoes_and_repeats"}
REASKS = ("parse", "clone")  # why a reply may be asked again free of T ([accounting]); the event keys add "_retries"


class Evaluator(Protocol):
    """coevolve.sandbox.Sandbox: scores (code, task, split, size) items in order."""

    def evaluate_many(self, items: Sequence[tuple[str, Any, str, int]]) -> list[EvalResult]: ...


def _answers(request: Request) -> str:
    """What the request's reply holds: a program, or edit blocks on its parent."""
    return operators.answer_of(request.operator)


def _repairs(candidate: Candidate) -> bool:
    """A candidate asked for by a failed-parent operator (repair)."""
    return operators.get(candidate.operator).failed_parent


def check_same_method(store: RunStore, config: RunConfig, events: list[dict] | None = None) -> None:
    """A resumed run keeps the method it started with: a UsageError (before anything is written) when
    its config.toml now names another."""
    events = store.events() if events is None else events
    logged = events[0].get("config") if events and events[0].get("type") == "start" else None
    was = logged.get("run", {}).get("method") if isinstance(logged, dict) else None
    if was is not None and was != config.run.method:
        raise UsageError(f"{store.dir}: the run was started with method {was!r}, its config.toml now says "
                         f"{config.run.method!r}; a run cannot change its method (start a new run)")


class MethodError(UsageError):
    """A user's method (a file, module or plugin; not a built-in, whose errors are ours and keep their
    traceback) raised in one of its hooks: one line naming the method, the hook, the line and the
    exception, then what becomes of the run. A UsageError (exit status 2), as a task's own code that
    raises (TaskError): the user's code, not ours; every step logged before it stays in the run."""


def _raised_in_method(exc: Exception, hook: str, source: str | None) -> str:
    """`Type: message (at file:line, in function)` with the deepest frame in the method's own file
    `source` (tasks.loader.raised_in's deepest user frame may be in another module of the user's) and the
    function it is in; raised_in where no frame is in that file."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = os.path.realpath(source) if source else None
    at = next((i for i in reversed(range(len(frames))) if os.path.realpath(frames[i].filename) == where), None)
    if at is None:
        return raised_in(exc, f"{hook}()")
    line = frames[at].lineno
    while frames[at].name.startswith("<") and at > 0 and frames[at - 1].filename == frames[at].filename:
        at -= 1  # a comprehension or a lambda: the function it is written in
    name = frames[at].name
    function = "" if name == hook else f", in {name}"
    return f"{type(exc).__name__}: {str(exc)[:300]} (at {frames[at].filename}:{line}{function})"


def method_named(name: str) -> str:
    """How a user's method `name` is named in what is said of it: 'method file PATH' or 'method MODULE'."""
    base = parse_name(name).base
    file_spec = _split_file(base)
    return f"method file {file_spec[0]}" if file_spec is not None else f"method {base}"


def method_error(name: str, hook: str, exc: Exception, step: int | None, directory: Path,
                 source: str | None = None) -> MethodError:
    """The MethodError for `exc`, raised by method `name`'s `hook` (at `step`; None: before the steps);
    `source`: the file its class is written in."""
    at = f" in step {step}" if step is not None else ""
    if _split_file(parse_name(name).base) is not None:
        # --resume refuses an edited method file (methods.remember_methods) and the unedited one would
        # raise here again: a fix can only be a new run
        way_on = (f"every finished step is in {directory}, but a run goes on only with the method file it "
                  f"started with, which would stop here again: fix the file and start a new run (another --out)")
    else:
        # a module or plugin is not recorded with the run: a fixed one resumes, its logged steps replayed
        # and checked (a fix that picks other parents for them is refused there)
        way_on = (f"every finished step is in {directory}: fix the method and continue with "
                  f"`coevolve run --resume {directory}`")
    line = " ".join(_raised_in_method(exc, hook, source).splitlines())  # one line, whatever the message holds
    return MethodError(f"{method_named(name)}: {hook}(){at} raised {line}\n{way_on}")


GLOBAL_DRAW = "global_random"  # the event that records a user's method drawing from the global generators


def global_generators() -> tuple[bytes, bytes]:
    """The state of Python's `random` and of numpy's legacy global generator (np.random.*), as bytes (any bit
    generator's state compares so): about 0.1 ms, against a request's seconds."""
    return pickle.dumps(random.getstate()), pickle.dumps(np.random.get_state(legacy=False))


def global_draw_event(name: str, hook: str, changed: tuple[bool, bool]) -> dict:
    """The log's record that user method `name`'s `hook` drew from the global generator(s) `changed` says
    ((random, numpy)), with its warning: one line naming the method, the hook and what to do."""
    drew = " and ".join(w for w, c in zip(("the global random module", "numpy's global np.random"), changed) if c)
    way = ("the rng it is handed" if hook in ("pick", "parents")
           else "a generator of its own seeded from run.seed (and the step), as docs/search.md shows")
    return {"type": GLOBAL_DRAW, "hook": hook, "drew": drew,
            "note": f"{method_named(name)} drew from {drew} in {hook}(): a resumed run will not repeat it; "
                    f"draw from {way}"}


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def request_seed(run_seed: int, step: int, slot: int) -> int:
    digest = hashlib.sha256(f"coevolve-request:{run_seed}:{step}:{slot}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def logged_result(result: EvalResult) -> Evaluation:
    """The sandbox's verdict as the loop keeps it (a step event's result, a
    Candidate's outcome): an objective only when it is a finite score, else the
    failure kind ("invalid" when the sandbox named none); the message's tail."""
    ok = result.ok
    failure = getattr(result.failure, "value", result.failure)  # a FailureKind, or cascade's plain name
    return Evaluation(objective=float(result.objective) if ok else None,
                      failure=None if ok else (failure or "invalid"),
                      message=str(result.message or "")[-2000:], seconds=float(result.seconds or 0.0),
                      profile=getattr(result, "profile", None) if ok else None,
                      behaviour=getattr(result, "behaviour", None) if ok else None,
                      feedback=getattr(result, "feedback", "") if ok else "")


RECENT_FAILURES = 48  # candidates looked back over for failures to show


def _same_code(candidate: Candidate) -> int:
    """The candidate whose program this one's is: the original it repeats or clones (the loop's duplicate
    detection: exact text, or a fingerprint under context.fingerprint), else itself."""
    return candidate.id if candidate.duplicate_of is None else candidate.duplicate_of


def distinct_failures(failed: Sequence[Candidate], by_id: dict[int, Candidate]) -> list[Candidate]:
    """`failed` in order, less each one that repeats the code of one before it or ends with the same
    message: a small model's copies of one failure would otherwise fill every slot of a step. A copy
    stands for its original where that failed as itself (its report has the error; a rejected clone's
    only says whose clone it is). `by_id`: the run's candidates, to find the originals."""
    codes: set[int] = set()
    messages: set[str] = set()
    out = []
    for c in failed:
        original = by_id.get(_same_code(c), c)
        if not original.valid and original.failure != "duplicate":
            c = original
        # an empty message (a result the task called invalid, unexplained) tells nothing apart
        message = f"{c.failure}:{c.message.strip()[-80:]}" if c.message.strip() else None
        if _same_code(c) in codes or message in messages:
            continue
        codes.add(_same_code(c))
        if message is not None:
            messages.add(message)
        out.append(c)
    return out


def failures_repeated(candidates: Sequence[Candidate], pool: Sequence[Candidate]) -> dict[str, int]:
    """Of the requests whose prompt showed a failure (`shown`), how many replies were the program of a
    failure shown (`repeated`): copied, not avoided. `pool`: every candidate, to look the shown ones up."""
    by_id = {c.id: c for c in pool}
    shown = [c for c in candidates if c.failures_shown]
    repeated = sum(c.duplicate_of is not None and c.duplicate_of in
                   {_same_code(by_id[i]) for i in c.failures_shown if i in by_id and by_id[i].code is not None}
                   for c in shown)
    return {"shown": len(shown), "repeated": repeated}


@dataclass
class Request:
    slot: int
    operator: str
    parents: list[Candidate]
    seed: int
    member: int | None  # index into the step's ES members; None: base weights
    failures: tuple[str, ...] = ()  # failure reports shown in the prompt
    skill: int | None = None  # the skill version the prompt shows (None: no skill)
    lean: int = 0  # how many of LEAN's parts the prompt leaves out to fit the engine's context
    failures_shown: tuple[int, ...] = ()  # the failed candidates `failures` reports, by id


# What a prompt too long for the engine's context leaves out, one more at a time, until it fits: a run
# that would stop there goes on (the request records how far it went; a prompt that fits is never touched)
LEAN = ("the failure report", "the parents' notes", "the skill", "all parents but the first")


def leaned(request: Request, level: int) -> Request:
    """`request` with LEAN's first `level` parts left out (its notes go in _context)."""
    if level == 0:
        return request
    return replace(request, lean=level, failures=(), failures_shown=(), skill=None if level >= 3 else request.skill,
                   parents=request.parents[:1] if level >= 4 else request.parents)


def request_record(request: Request) -> dict:
    """A request as a step event logs it (what a resumed run checks it replays)."""
    return {"slot": request.slot, "operator": request.operator, "parents": [p.id for p in request.parents],
            "seed": request.seed, "member": request.member, "skill": request.skill,
            **({"failures_shown": list(request.failures_shown)} if request.failures_shown else {}),
            **({"lean": request.lean} if request.lean else {})}


@dataclass(frozen=True)
class Batch:
    """One generator call: a conversation and a sampling seed per request, and
    the decoding pattern per request when it is on."""

    conversations: list[list[Message]]
    seeds: list[int]
    constraints: list[str] | None = None

    def chat(self, generator: Generator, sampling: Sampling, constrained: bool = True,
             on_each: Callable[[int, Completion], None] | None = None) -> list[Completion]:
        # the pattern (and the per-reply callback) travel only when set: generators that never constrain
        # (or stream) need not take them
        extra: dict[str, Any] = {"constraints": self.constraints} if constrained and self.constraints else {}
        if on_each is not None:
            extra["on_each"] = on_each
        return generator.chat(self.conversations, sampling, seeds=self.seeds, **extra)

    def part(self, indices: Sequence[int]) -> Batch:
        """These requests of the batch alone, each with its own seed and pattern."""
        if list(indices) == list(range(len(self.seeds))):
            return self
        return Batch([self.conversations[i] for i in indices], [self.seeds[i] for i in indices],
                     None if self.constraints is None else [self.constraints[i] for i in indices])

    def job(self, member: dict, sampling: Sampling) -> MemberJob:
        """The batch under one ES member's perturbation."""
        return MemberJob(member["seed"], member["sigma"], self.conversations, sampling, self.seeds, self.constraints)


@dataclass
class Progress:
    """What the progress bar and the final table show."""

    used: int = 0
    valid: int = 0
    best: float | None = None
    sigma: float | None = None
    replayed: bool = False  # the step reported was replayed from the log: an earlier session's work
    skill: int | None = None  # the skill version in use (None: none yet)
    trial: int | None = None  # the version on trial against it (skill.keep = "judged")
    refreshed: bool = False  # the step reported wrote a new skill version

    @property
    def valid_rate(self) -> float:
        return self.valid / self.used if self.used else 0.0


@dataclass
class SearchLoop:
    config: RunConfig
    store: RunStore
    engine: Generator | WeightEngine  # a WeightEngine for the ESOpt variants
    evaluator: Evaluator
    task: Any  # tasks.base.HeuristicTask
    endpoint: Generator | None = None  # optional OpenAI-compatible endpoint for base-weight requests
    on_progress: Callable[[Progress], None] | None = None
    # a line for the user's terminal (a resume's `weights:` line, es.start.start_es; a method's global draws);
    # None: stderr
    on_note: Callable[[str], None] | None = None
    # the live step's work as it starts (a progress bar's `now=step 3: e1 10 requests`), None once it is
    # reported: a step on the CPU engine runs for minutes without moving the bar
    on_phase: Callable[[str | None], None] | None = None
    timing: dict = field(default_factory=lambda: Counter())

    def run(self) -> SearchSummary:
        """Run (or resume) to the end of the plan; the summary also written to summary.json."""
        started = time.perf_counter()
        cfg = self.config
        self.method: Method = make_method(cfg)  # it owns the archive (population, islands, grid)
        events = self.store.events()
        # wall-clock time of earlier sessions (up to their last completed step): kept out of the event
        # log, whose steps must be the same run to run; read first, so a damaged clock.json stops nothing midway
        self.wall_before = wall_before(self.store)
        self.event_log: JsonlWriter | None = None
        # what the log says of the method's global draws: said and recorded once a run, not again on resume
        self.global_draw = next((e for e in events if e.get("type") == GLOBAL_DRAW), None)
        self.global_draw_logged = self.global_draw is not None
        self._hook("start", None, self.task)
        self.ledger = Ledger(cfg.run.budget + self.method.outside_budget())
        self.candidates: list[Candidate] = []
        # the same candidates by id, kept as they are added: each request's failures look originals up in it
        self.by_id: dict[int, Candidate] = {}
        self.code_seen: dict[str, Candidate] = {}
        self.overlap: Overlap | None = None  # the current step's early scorings, with an endpoint
        self.progress = Progress()
        self.es = self._start_es(events) if cfg.uses_es else None
        self.es_updates = 0
        self._start_context()

        logged = {e["step"]: e for e in events if e.get("type") == "step"}
        taken = taken_counts(events)  # what each logged step took, kept (methods.step_count)
        # budgets raised by `--resume DIR --budget N`, for the summary
        self.extensions = [{"from": e.get("from"), "budget": e.get("budget")} for e in events if e.get("type") == "extend"]
        self._check_start(events)
        logged_rules = events[0].get("rules") if events else RULES
        self.rules = {k for k, v in RULES.items() if isinstance(logged_rules, dict) and logged_rules.get(k) == v}
        self.versions.generations_from_trial = "judged_generations" in self.rules
        refused = [e for e in events if e.get("type") == "constrain"]
        if refused:  # an endpoint refused the pattern earlier: free decoding, and its refused requests counted
            self.pattern, self.constrain_state = None, refused[-1]["state"]
            self.ledger.llm_requests += sum(e.get("requests", 0) for e in refused)
        refused_edits = [e for e in events if e.get("type") == "edit_constrain"]
        self.edit_patterns = not refused_edits  # an engine or endpoint refused an edit pattern earlier
        self.ledger.llm_requests += sum(e.get("requests", 0) for e in refused_edits)
        self.session_start = time.perf_counter()
        self.stopped: dict | None = None
        self.prompts_written: set[str] = set()  # the sha256 of each prompt prompts.jsonl holds in full
        self.leaned = 0  # requests whose prompt left parts out to fit the engine's context (LEAN)
        self.refused_long = 0  # an endpoint's refusals of prompts too long for its model (asked again, leaned)
        sampling = cfg.sampling
        prompts = (JsonlWriter(self.store.path(PROMPTS), fsync=False) if cfg.log.prompts
                   else contextlib.nullcontext())
        # an endpoint's replies to the step a kill interrupted: the first step not logged (logged steps run from 0)
        self.answered = Answered(self.store.path(ANSWERED), max(logged, default=-1) + 1)
        self.asking = -1  # the live step whose requests are out
        with self.store.event_writer() as event_log, JsonlWriter(self.store.candidates_path, truncate=True) as cand_log, \
                prompts as prompt_log, self.answered:
            self.event_log, self.prompt_log = event_log, prompt_log
            if not events:
                event_log.append({**start_event(HEURISTIC, EVENT_VERSION, as_dict(cfg)), "rules": RULES})
            self._log_global_draw()  # a draw in start() waits for the start event
            self._start_skill(events, event_log)
            self._seed_archive(events, event_log)
            for step, spec in enumerate(self._plan()):
                if step not in logged:
                    self.stopped = self._cap_reached(step)
                    if self.stopped is not None:
                        event_log.append({"type": "stop", **self.stopped})
                        break
                # a logged step takes what it took: the last step of a run since given more budget
                # (`--resume DIR --budget N`) may have been cut short by the old one
                granted = self.ledger.grant(step_count(step, spec, taken))
                if granted == 0:
                    break
                if self.on_phase is not None and step not in logged:
                    self.on_phase(f"step {step}: {spec.operator} {plural(granted, 'request')}")
                event, made, update = self._step(step, spec, granted, sampling, logged.get(step), event_log)
                for candidate in made:
                    cand_log.append(candidate.to_dict())
                if update is not None:  # after the step's candidates: readers of the run (the dashboard's count of
                    update()            # evaluations) see the step whole while the weights move (seconds)
                atomic_write_json(self.store.path("clock.json"), {"wall_s": round(self._wall(), 3)})
                atomic_write_json(self.store.population_path(step), {
                    "step": step, "operator": spec.operator, "evaluations": self.ledger.used,
                    **self._hook("snapshot", step)})
                self._report(event, replayed=step in logged)
            summary = self._finish()
            if self.stopped is None and not ended(events):
                event_log.append({"type": "end", "evaluations": self.ledger.used})
        self.timing["total_s"] = time.perf_counter() - started
        self.timing["wall_s_all_sessions"] = self._wall()
        atomic_write_json(self.store.path("timing.json"), {k: round(v, 3) for k, v in self.timing.items()})
        return summary

    # set-up -------------------------------------------------------------------
    def _start_es(self, events: list[dict]) -> Any:
        cfg = self.config
        budget = cfg.run.budget + self.method.outside_budget()
        generations = planned_es_generations(self.method, budget, cfg.es.proposals_per_member)
        # es.sigma_steps = "generation": the σ schedule steps once per plan generation
        # that holds an ES update (the reference's stepping), not once per update
        self.sigma_generations = sorted({s.generation for s in planned_steps(self.method, budget,
                                                                             cfg.es.proposals_per_member)
                                         if s.perturbed})
        if cfg.es.sigma_steps == "generation":
            generations = len(self.sigma_generations)
        es_cfg = cfg.es.resolve(population=es_population(cfg), generations=max(generations, 1))
        # the updates the log records: a step event holds its update's record (`es`) before history.jsonl does
        logged = sum(1 for e in events if e.get("type") == "step" and e.get("es"))
        return start_es(es_cfg, self.store.history_path, self.engine, cfg.run.seed, logged_updates=logged,
                        log_path=self.store.events_path, on_note=self.on_note)

    def _start_context(self) -> None:
        """Signature pattern, clone index (the template is key 0), skill, caps' counters."""
        cfg, task = self.config, self.task
        self.signature, why = template_signature(task.template, task.function_name)
        self.pattern = answer_pattern(self.signature) if cfg.context.constrain and self.signature else None
        self.constrain_state = ("on" if self.pattern else "off" if not cfg.context.constrain
                                else f"off: {why} (free decoding, the parser repairs)")
        self.edit_patterns = True  # edits decode under their parent's pattern while decoding is constrained
        # the clone index serves both rejection (context.fingerprint) and free re-asks (accounting.clone_retries)
        self.reject_clones = cfg.context.fingerprint
        self.clones = (CloneIndex(cfg.context.similarity) if cfg.context.fingerprint or cfg.accounting.clone_retries
                       else None)
        template_fp = fingerprint(task.template)
        if self.clones is not None and template_fp is not None:
            self.clones.add(0, template_fp)
        # the skill versions kept, the current one, the one on trial and which one a request shows
        self.versions = SkillVersions(judged=cfg.skill.keep == "judged")
        self.skill_versions: list[dict] = []  # what each refresh wrote, for the summary
        self.analysed_successes: list[int] = []  # the valid programs the last refresh's analysts read
        self.analysts_cut = 0  # skill analysts' replies that ended at skill.max_tokens
        self.skill_name = skills.skill_name(task.name)
        self.spend = 0.0

    def _check_start(self, events: list[dict]) -> None:
        renamed = type(self.config).RENAMED  # [proposer] is read as [endpoint]
        logged = logged_config(self.store, events, kind=HEURISTIC, version=EVENT_VERSION, renamed=renamed)
        if logged is None:
            return
        check_same_method(self.store, self.config, events)
        if isinstance(logged, dict) and "context" not in logged:
            # started before [context] existed: its steps were proposed without any of it
            from coevolve.search.runconfig import ContextSection

            self.config.context = ContextSection(failures=False, constrain=False, fingerprint=False,
                                                 seed_template=False, feedback=False)
            self._start_context()
        else:
            if isinstance(logged, dict) and "seed_template" not in logged["context"]:
                # started before the seed existed: its archive started empty, and its replay must too
                self.config.context.seed_template = False
            if isinstance(logged, dict) and "feedback" not in logged["context"]:
                self.config.context.feedback = False  # its prompts showed scores alone: they go on so
        # `coevolve run --resume` made this check before the engine loaded; a comparison's resume meets it here
        check_same_config(self.store, logged, as_dict(self.config))

    def _start_skill(self, events: list[dict], event_log: JsonlWriter) -> None:
        """skill.start: the skill every prompt shows from the first request, kept as the run's
        skills/v000 (+trace2skill's refreshes patch it). Its text is read once and logged as the
        "skill_start" event, so a resumed run shows what it began with, whatever the folder holds now."""
        self.skill_start: dict | None = None
        source = self.config.skill.start
        if not source:
            return
        logged = next((e for e in events if e.get("type") == "skill_start"), None)
        if logged is None:
            start = skills.start_skill(source)
            event_log.append({"type": "skill_start", "source": source, "text": start.text()})
        else:
            start = parse_skill_text(logged["text"], source)
        kept = skills.write_version(self.store.dir, 0, start.name, start.description, start.body)
        self.versions.add(0, kept, -1, self.es_updates)  # on trial (skill.keep = "judged") from the first step, step 0
        self.skill_start = {"source": source, "name": start.name, "rules": skills.rule_count(start.body),
                            "path": str((kept.path / "SKILL.md").relative_to(self.store.dir))}

    def _seed_archive(self, events: list[dict], event_log: JsonlWriter) -> None:
        """context.seed_template: the template into the method's archive as candidate 0 (the
        clone index's key 0); [start] programs: each file's program as candidate -1, -2, ...
        Each is scored once like a candidate (the sandbox, the cascade) but not proposed: no
        request, no charge. Its result is logged as a "seed" event (a starting program's with its
        path and code), so a resumed run restores the same archive without scoring or reading
        anything again."""
        self.seed_program: Candidate | None = None
        self.start_programs: list[Candidate] = []
        task, logged = self.task, {e.get("id", 0): e for e in events if e.get("type") == "seed"}
        seeds = []
        if self.config.context.seed_template:
            seeds.append(Candidate(id=0, step=-1, operator="template", parents=[], model_state={"kind": "template"},
                                   code=task.template, idea="the task's template"))
        paths = self.config.start.programs
        missing = [i for i in range(1, len(paths) + 1) if -i not in logged]
        read = dict(zip(missing, read_programs([paths[i - 1] for i in missing], task.function_name, task.template)))
        for i, path in enumerate(paths, start=1):
            code = logged[-i]["code"] if -i in logged else read[i][1]
            seeds.append(Candidate(id=-i, step=-1, operator=START_OPERATOR, parents=[],
                                   model_state={"kind": START_OPERATOR, "path": path}, code=code,
                                   idea=f"starting program {Path(path).name}"))
        fresh = [seed for seed in seeds if seed.id not in logged]
        began = time.perf_counter()
        scored = dict(zip([seed.id for seed in fresh],
                          cascade.evaluate_many(self.evaluator, task, [seed.code for seed in fresh], []) if fresh else []))
        self.timing["evaluate_s"] += time.perf_counter() - began
        for seed in seeds:
            if seed.id in logged:
                result = Evaluation.model_validate(logged[seed.id]["result"])
            else:
                result = logged_result(scored[seed.id])
                program = {"path": seed.model_state["path"], "code": seed.code} if seed.id < 0 else {}
                event_log.append({"type": "seed", "id": seed.id, **program, "result": result.to_event()})
            seed.settle(result)
            self.ledger.seeded += 1
            if seed.id == 0:
                self.seed_program = seed
            else:
                self.start_programs.append(seed)
                fp = fingerprint(seed.code) if self.clones is not None else None
                if fp is not None:
                    self.clones.add(seed.id, fp)  # a proposal that clones it is a clone, as of the template
            self._hook("seed", None, seed)  # an invalid one is scored and recorded, but no archive admits it

    def _seeds(self) -> list[Candidate]:
        """The programs the archive started with: the seeded template, then the starting programs."""
        return ([self.seed_program] if self.seed_program is not None else []) + self.start_programs

    # one step -----------------------------------------------------------------
    def _step(self, step: int, spec: StepSpec, granted: int, sampling: Sampling, logged: dict | None,
              event_log: JsonlWriter) -> tuple[dict, list[Candidate], Callable[[], None] | None]:
        """The step's event (logged before it returns), its candidates, and its ES update still to apply
        (None: none): the caller applies it once the candidates are written."""
        # an endpoint's replies are scored as they arrive, while the rest are generated (coevolve/search/overlap.py)
        streams = (logged is None and self.config.sandbox.overlap and self.endpoint is not None
                   and getattr(self.endpoint, "streams", False))
        self.overlap = Overlap(self.evaluator, getattr(self.evaluator, "workers", 1)) if streams else None
        try:
            return self._step_body(step, spec, granted, sampling, logged, event_log)
        finally:
            if self.overlap is not None:
                self.timing["overlapped"] += self.overlap.taken
                self.overlap.close()
                self.overlap = None

    def _step_body(self, step: int, spec: StepSpec, granted: int, sampling: Sampling, logged: dict | None,
                   event_log: JsonlWriter) -> tuple[dict, list[Candidate], Callable[[], None] | None]:
        weights = self._reweight() if logged is None else logged.get("weights")
        if spec.operator == DISTILL:
            return self._distill(step, granted, logged, event_log, weights), [], None
        cfg = self.config
        per_member = cfg.es.proposals_per_member
        perturbed = spec.perturbed and members_for(granted, per_member) >= 2
        rng = np.random.default_rng([cfg.run.seed, step])
        # an ES generation's members all see one skill version (es_updates: the generations before this one)
        generation_skill = self.versions.for_generation(self.es_updates) if perturbed else None
        requests = []
        for slot in range(granted):
            operator, parents = self._operator_parents(spec.operator, rng, step, slot)
            shown = generation_skill if perturbed else self.versions.for_request(self.ledger.used + slot)
            failed = self._failures_for(operator, parents, slot)
            requests.append(Request(slot, operator, parents, request_seed(cfg.run.seed, step, slot),
                                    slot // per_member if perturbed else None,
                                    tuple(describe_failure(c, cfg.context.failure_chars) for c in failed), shown,
                                    failures_shown=tuple(c.id for c in failed)))
        if logged is not None:
            records = logged["requests"]  # (a count that differs is _check_logged's to refuse)
            requests = [leaned(r, records[i].get("lean", 0)) if i < len(records) else r for i, r in enumerate(requests)]
            self._check_logged(step, logged, requests)
            members = logged["es"]["members"] if logged.get("es") else []
            completions = [Completion(**c) for c in logged["completions"]]
            retried = {kind: logged.get(f"{kind}_retries", []) for kind in REASKS}
            refused = logged.get("refused_long", 0)
            self.ledger.llm_requests += refused
            self.refused_long += refused
        else:
            members = self._ask(members_for(granted, per_member), spec.generation) if perturbed else []
            before, self.asking = self.refused_long, step
            requests, completions = self._generate(self._fit(requests), members, sampling)
            retried = None
        # once (the re-asks and candidates read it; a reply the overlap hook parsed is not parsed again)
        parsed = [self._parsed_early(r, c) for r, c in zip(requests, completions)]
        if retried is None:
            retried = self._reask(step, requests, members, sampling, completions, parsed)
            refused = self.refused_long - before
            # after the re-asks: one an endpoint leaned further was shown less than its first prompt
            self._log_prompts(step, [self._messages(r) for r in requests])
        self.leaned += sum(r.lean > 0 for r in requests)  # (after the re-asks: an endpoint may lean one further)
        for kind, replaced in retried.items():
            self.ledger.record_llm([Completion(**c) for c in replaced])  # their tokens count, their texts do not
            self.ledger.count_reasks(kind, len(replaced))
        self.ledger.record_llm(completions)
        self._price([c for r, c in zip(requests, completions) if r.member is None and self.endpoint is not None])

        step_candidates = [self._candidate(step, request, code, members, c.model)
                           for request, code, c in zip(requests, parsed, completions)]
        results = ([Evaluation.model_validate(r) for r in logged["results"]] if logged is not None
                   else self._evaluate(step_candidates))
        cascade.relabel(self.ledger, results)  # stage-1 rejections: the ledger names their outcome
        for candidate, result in zip(step_candidates, results):
            self._settle(candidate, result)

        es_record = None
        if perturbed:
            es_record = self._rewards(step, step_candidates, requests, members)
            if logged is not None:
                es_record["generation"] = logged["es"]["generation"]
        event = {"type": "step", "step": step, "operator": spec.operator,
                 "requests": [request_record(r) for r in requests],
                 "completions": [completion_record(c) for c in completions],
                 "results": [r.to_event() for r in results], "es": es_record,
                 **({"weights": weights} if weights else {})}
        for kind, replaced in retried.items():
            if replaced:
                event[f"{kind}_retries"] = replaced
        if refused:
            event["refused_long"] = refused
        if logged is None:
            event_log.append(event)  # before the ES update: a kill in between re-applies it on resume
            self.answered.clear()  # its replies are in the log now

        self._hook("admit", step, step, step_candidates, self.ledger.used)
        update = (lambda: self._tell(es_record, members)) if es_record is not None else None
        return event, step_candidates, update

    # context ----------------------------------------------------------------------
    def _operator_parents(self, operator: str, rng: np.random.Generator, step: int,
                          slot: int) -> tuple[str, list[Candidate]]:
        """The request's operator and parents. A failed-parent operator (repair) takes a recent
        failed program (one that has code and was scored); with none yet it is its fallback
        (m1) on the archive, and every operator is the parentless one (i1) while the archive
        has nothing to offer."""
        op = operators.get(operator)
        if op.failed_parent:
            failed = [c for c in self.candidates[-RECENT_FAILURES:]
                      if not c.valid and c.code is not None and c.failure != "duplicate"]
            if failed:
                return operator, [failed[int(rng.integers(len(failed)))]]
            operator = op.fallback
        parents = self._hook("pick", step, operator, rng, step, slot)
        return (operator if parents or operators.get(operator).parentless else operators.start_operator()), parents

    def _hook(self, hook: str, step: int | None, *args: Any) -> Any:
        """self.method.<hook>(*args). What a user's method raises there stops the run as one line
        (MethodError); a built-in's exception passes with its traceback: it is a bug of ours. A user's
        method that draws from the global generators there is warned (_check_global_draws)."""
        before = self._global_generators()
        try:
            result = getattr(self.method, hook)(*args)
        except UsageError:
            raise  # already one line (e.g. a method's own check)
        except Exception as exc:
            if self._builtin():
                raise
            source = getattr(sys.modules.get(type(self.method).__module__), "__file__", None)
            raise method_error(self.config.run.method, hook, exc, step, self.store.dir, source) from exc
        self._check_global_draws(hook, before)
        return result

    def _plan(self) -> Iterator[StepSpec]:
        """The method's plan, each step taken from its steps() checked for global draws as the hooks are."""
        plan, end = self.method.plan(), object()
        while True:
            before = self._global_generators()
            spec = next(plan, end)
            self._check_global_draws("steps", before)
            if spec is end:
                return
            yield spec

    def _builtin(self) -> bool:
        return parse_name(self.config.run.method).base in BUILTIN

    def _global_generators(self) -> tuple[bytes, bytes] | None:
        """global_generators() around a user's method's code; None for a built-in (ours draw only from rngs)."""
        return None if self._builtin() or self.global_draw is not None else global_generators()

    def _check_global_draws(self, hook: str, before: tuple[bytes, bytes] | None) -> None:
        """Say, and log, the first time a user's method moves Python's or numpy's global generator: the
        engine seeds them in each session, an endpoint run not at all, so a resume's replay draws otherwise
        and is refused (_check_logged names this cause), or, on the engine, works by accident."""
        if before is None:
            return
        changed = tuple(a != b for a, b in zip(before, global_generators()))
        if not any(changed):
            return
        self.global_draw = global_draw_event(self.config.run.method, self._written_hook(hook), changed)
        (self.on_note or _to_stderr)(f"warning: {self.global_draw['note']}")
        self._log_global_draw()

    def _written_hook(self, hook: str) -> str:
        """The hook of the user's method that a call of `hook` runs, named so: the base pick only calls parents."""
        return "parents" if hook == "pick" and type(self.method).pick is Method.pick else hook

    def _log_global_draw(self) -> None:
        """The global-draw event into the log, once a run (the start event first: a draw in start() waits)."""
        if self.global_draw is not None and not self.global_draw_logged and self.event_log is not None:
            self.event_log.append(self.global_draw)
            self.global_draw_logged = True

    def _failures_for(self, operator: str, parents: list[Candidate], slot: int) -> tuple[Candidate, ...]:
        """The failed candidates whose reports a request shows: repair's own parent; else, with
        context.failures, one recent failure, a failed child of one of the request's parents first
        (its sibling), spread over the slots (distinct_failures: three different ones where the run
        has them)."""
        if operators.get(operator).failed_parent:
            return (parents[0],)
        if not self.config.context.failures:
            return ()
        failed = [c for c in reversed(self.candidates[-RECENT_FAILURES:]) if not c.valid]
        if not failed:
            return ()
        ids = {p.id for p in parents}
        siblings = [c for c in failed if ids & set(c.parents)]
        pool = distinct_failures(siblings or failed, self.by_id)[:3]
        return (pool[slot % len(pool)],)

    def _context(self, request: Request) -> Context:
        # the skill's sections only (its title and provenance line are for people), cut to skillpatch.SKILL_CHARS
        return Context(skill=self.versions.shown(request.skill), failures=request.failures,
                       signature=self.signature or "" if self.config.context.constrain else "",
                       notes=self._notes(request))

    def _notes(self, request: Request) -> tuple[str, ...]:
        """context.feedback: what each valid parent's evaluation said besides its score."""
        if not self.config.context.feedback or operators.get(request.operator).failed_parent or request.lean >= 2:
            return ()
        limit, direction = self.config.context.failure_chars, self.task.direction
        return tuple(parent_note(p.profile, self.template_scores, direction, p.feedback, limit)
                     if p.valid else "" for p in request.parents)

    @cached_property
    def template_runs(self) -> list[tuple[list[Any], Any]] | None:
        """The template's decisions on the training set and those instances, under each scoring seed
        ([sandbox] seeds, as its candidates are scored), computed here once (our own code: no sandbox,
        no budget) for the parents' notes and the summary's template score; None when the template
        cannot run in this process (the test fakes). The task's code exiting (guarded) stops the run
        with one line (coevolve.cli), its finished steps kept."""
        try:
            with guarded("the template's decide() and score() on {} {}".format(*self.task.train)):
                return template_runs(self.task, self.config.sandbox.seeds)
        except Exception:
            return None

    @cached_property
    def template_scores(self) -> list[float] | None:
        """The template's per-instance train objectives (means over the seeds); None for a task without
        instance_scores."""
        if self.template_runs is None or not callable(getattr(self.task, "instance_scores", None)):
            return None
        runs = self.template_runs
        try:
            with guarded("the template's instance_scores() on {} {}".format(*self.task.train)):
                return mean_profile(self.task, runs)
        except Exception:  # notes without the comparison
            return None

    def _distill(self, step: int, granted: int, logged: dict | None, event_log: JsonlWriter,
                 weights: dict | None = None) -> dict:
        """One skill refresh: `granted` analyst requests, each charged one evaluation."""
        cfg, task = self.config, self.task
        trial = self.versions.judge(self._pool(), step, task.direction)  # first: the analysts patch the one kept
        # a run started before the "analyst_cases" rule: its logged refreshes read the cases picked knowing
        # neither the template's scores nor the previous refresh's cases
        current = "analyst_cases" in self.rules
        cases = skills.pick_cases(self.candidates, granted, cfg.skill.successes, cfg.skill.recent, task.direction,
                                  template=self.template_scores if current else None,
                                  previous=self.analysed_successes if current else ())
        self.analysed_successes = [c.id for c in cases if c.valid]  # a resume replays refreshes in order: rebuilt
        seeds = skills.analyst_seeds(cfg.run.seed, step, len(cases))
        requests = [Request(i, DISTILL, [c], seed, None) for i, (c, seed) in enumerate(zip(cases, seeds))]
        teacher = self.endpoint if cfg.skill.teacher == "endpoint" else self.engine
        if logged is not None:
            self._check_logged(step, logged, requests)
            completions = [Completion(**c) for c in logged["completions"]]
        elif cases:
            conversations = skills.analyst_conversations(cases, task, self.versions.outline,
                                                         cfg.context.failure_chars, self.template_scores)
            batch = Batch(conversations, seeds)
            began = time.perf_counter()
            # an endpoint's replies kept as they arrive, as the proposer's are (_ask_endpoint)
            asked = self.answered.serving(teacher, step) if teacher is self.endpoint else teacher
            completions = self._analyses(asked, batch, Sampling(temperature=cfg.skill.temperature,
                                                                  max_tokens=cfg.skill.max_tokens))
            self.timing["distill_s"] += time.perf_counter() - began
            self._log_prompts(step, conversations, analysts=True)
        else:
            completions = []
        self.ledger.record_llm(completions)
        if self.endpoint is not None and teacher is self.endpoint:  # a run with no engine asks it for both
            self._price(completions)
        for _ in completions:
            self.ledger.charge(DISTILL)
        # replies that ended at skill.max_tokens (from the log on resume, as the run's own cut_off counts)
        self.analysts_cut += sum(c.finish_reason == "length" for c in completions)
        record = None
        if completions:
            version = len(self.skill_versions) + 1
            errors = sum(not c.valid for c in cases)
            source = (f"{errors} error and {len(cases) - errors} success analyses of this run's candidates "
                      f"(version {version}, after {self.ledger.used} evaluations)")
            contract = skills.contract_rules(task.template, task.function_name, self.signature or "")
            # the task's name, not the folder's slug: the description is what distilled_for reads the task from
            description, body, origins = skills.refreshed(self.versions.skill, [c.text for c in completions], cases,
                                                          contract, task.name, self.skill_name, source)
            written = skills.write_version(self.store.dir, version, self.skill_name, description, body)
            shown = (logged or {}).get("skill", {}).get("text")
            if logged is not None and isinstance(shown, str) and shown != written.text():
                # a run resumed by newer code (a skill's wording changed since): its prompts showed the logged
                # version, so the run goes on with that one
                atomic_write_text(written.path / "SKILL.md", shown)
                written = load_skill(written.path)
            patched = self.versions.current
            self.versions.add(version, written, step, self.es_updates)
            record = {"version": version, "text": written.text(), "step": step}
            self.skill_versions.append({"version": version, "step": step, "evaluations": self.ledger.used,
                                        "rules": skills.rule_count(written.body), "patched": patched,
                                        "path": str((written.path / "SKILL.md").relative_to(self.store.dir)),
                                        # where its rules came from: contract, stand-ins, the analyses (usable of asked)
                                        "origins": asdict(origins)})
        event = {"type": "step", "step": step, "operator": DISTILL,
                 "requests": [request_record(r) for r in requests],
                 "completions": [completion_record(c) for c in completions],
                 "results": [], "es": None, "skill": record, **({"trial": trial} if trial else {}),
                 **({"weights": weights} if weights else {})}
        if logged is None:
            event_log.append(event)
            self.answered.clear()  # its replies are in the log now
        return event

    @staticmethod
    def _analyses(teacher: Generator, batch: Batch, sampling: Sampling) -> list[Completion]:
        """The analysts' replies: one whose prompt the teacher refused as too long found nothing (an
        empty reply, recorded in the step event), and the refresh goes on with the others."""
        return answered_or_empty(lambda asked: batch.part(asked).chat(teacher, sampling), len(batch.seeds),
                                 "every skill analyst's prompt was refused (an analyst reads its candidate's code "
                                 "and failure, cut to context.failure_chars, and the skill's outline); show less, "
                                 "or give the teacher a longer context")

    # caps -------------------------------------------------------------------------
    def _wall(self) -> float:
        return self.wall_before + time.perf_counter() - self.session_start

    def _price(self, completions: Sequence[Completion]) -> None:
        """Add the endpoint's price of these completions to the run's spend (an ensemble's: each
        completion at its own model's price)."""
        for c in completions:
            prices = self.config.caps.prices.get(c.model or self.config.endpoint.model)
            if prices:
                self.spend += (c.prompt_tokens * prices[0] + c.completion_tokens * prices[1]) / 1e6

    def _cap_reached(self, step: int) -> dict | None:
        """The cap that stops the run before plan step `step`, if one does. All but wall_s
        depend on the run's own log only, so a resumed run stops where the first would have."""
        caps, best = self.config.caps, self.method.best()
        # plan steps since the best objective was reached (all of them while there is none)
        stale = step if best is None or caps.patience is None else step - 1 - self._reached(best)
        reached = best is not None and caps.target is not None and (
            best.objective <= caps.target if self.task.direction == "min" else best.objective >= caps.target)
        for name, used, limit in (("completion_tokens", self.ledger.completion_tokens, caps.completion_tokens),
                                  ("wall_s", self._wall(), caps.wall_s), ("money", self.spend, caps.money),
                                  ("patience", stale, caps.patience)):
            if limit is not None and used >= limit:
                return {"cap": name, "used": round(used, 6), "limit": limit, "step": step,
                        "evaluations": self.ledger.used}
        if reached:
            return {"cap": "target", "used": best.objective, "limit": caps.target, "step": step,
                    "evaluations": self.ledger.used, "direction": self.task.direction}
        return None

    def _reached(self, best: Candidate) -> int:
        """The plan step that first reached `best`'s objective (a seed's is -1). A later program that
        only wins a tie-break ([eoh] tie_break: same objective, fewer lines, less time) is no better for
        caps.patience: under `min seconds` timing noise alone would otherwise keep a stuck run going."""
        return min(c.step for c in [best, *self._seeds(), *self.candidates]
                   if c.valid and c.objective == best.objective)

    def _check_logged(self, step: int, logged: dict, requests: list[Request]) -> None:
        # the skill version shown (None: none) is compared where the log says it (not in logs written before)
        mine = [(r.slot, r.operator, [p.id for p in r.parents], r.seed, r.skill) for r in requests]
        theirs = [(r["slot"], r["operator"], r["parents"], r["seed"],
                   r["skill"] if "skill" in r or i >= len(mine) else mine[i][4])
                  for i, r in enumerate(logged["requests"])]
        if mine != theirs:
            drew = self.global_draw
            cause = (f": {method_named(self.config.run.method)} drew from {drew.get('drew')} in {drew.get('hook')}(), "
                     "which a resume does not repeat; fix the method and start a new run" if drew is not None
                     else "; the run directory was written by different code or config")
            raise ResumeError(f"{self.store.events_path}: step {step} does not replay the same requests{cause}")

    def _fit(self, requests: list[Request]) -> list[Request]:
        """Each request whose prompt the engine's context ([model] max_len) cannot hold, leaned (LEAN)
        until it fits, or as far as it goes (the engine then says what a prompt holds). Only where
        the engine measures prompts as it sends them (`prompt_lengths`: the engine, an engine pool): an
        endpoint's tokenizer is not ours, so its requests are leaned only when it refuses them
        (`_from_endpoint`)."""
        measure = getattr(self.engine, "prompt_lengths", None)
        if measure is None:
            return requests
        limit, fitted = self.config.model.max_len, list(requests)
        mine = [i for i, r in enumerate(requests) if r.member is not None or self.endpoint is None]
        while mine:
            lengths = measure([self._messages(fitted[i]) for i in mine])
            # vLLM takes prompts shorter than max_len; one with all of LEAN left out goes as it is
            mine = [i for i, n in zip(mine, lengths) if n >= limit and fitted[i].lean < len(LEAN)]
            for i in mine:
                fitted[i] = self._leaner(fitted[i])
        return fitted

    def _messages(self, request: Request) -> list[dict]:
        t = self.task
        start = starting_program(t, self.config.start.program)
        return operator_messages(request.operator, t.description, start, t.function_name, t.direction,
                                 request.parents, show_scores=self.config.eoh.show_scores,
                                 context=self._context(request))

    def _generate(self, requests: list[Request], members: list[dict],
                  sampling: Sampling) -> tuple[list[Request], list[Completion]]:
        """The requests as sent (an endpoint's refused prompts leaned) and their replies, by slot."""
        try:
            return self._replies(requests, members, sampling)
        except ContextLengthError as exc:  # what a prompt holds, so the user knows what to cut
            # advice only of what this run has: parents where the prompts showed some (not a Sample run's i1
            # prompts), eoh.parents where it set how many, the context of the model that was asked
            shown = any(r.parents for r in requests)
            counted = self.config.eoh.parents > 1 and any(
                r.parents and operators.get(r.operator).parents is None for r in requests)
            their_code = "each parent's code and evaluation, " if shown else ""
            parents = "fewer parents: eoh.parents; " if counted else ""
            engine = self.endpoint is None or any(r.member is not None for r in requests)
            served = self.endpoint is not None and any(r.member is None for r in requests)
            longer = "; ".join([*(["[model] max_len"] if engine else []),
                                *(["a served model's --max-model-len"] if served else [])])
            raise ContextLengthError(
                f"{exc}: a {self.task.name} prompt holds the task's description and template, "
                f"{their_code}the skill and recent failures (an engine "
                "that measures prompts has already left out all it may, and an endpoint's refused prompts were "
                f"leaned as far as they go: LEAN); show less ({parents}shorter failure reports: "
                f"context.failure_chars; a shorter task description), or give the model a longer context ({longer})",
                exc.index, origin=exc.origin) from None

    def _replies(self, requests: list[Request], members: list[dict],
                 sampling: Sampling) -> tuple[list[Request], list[Completion]]:
        began = time.perf_counter()
        out: list[Completion | None] = [None] * len(requests)
        sent = list(requests)
        base = [r for r in requests if r.member is None]
        if base and self.endpoint is not None:
            for r in self._from_endpoint(base, sampling, out):
                sent[r.slot] = r
        elif base:
            texts = self._constrained(lambda: self._batch(base).chat(self.engine, sampling), base)
            for r, c in zip(base, texts):
                out[r.slot] = c
        owners = []
        for index, member in enumerate(members):
            mine = [r for r in requests if r.member == index]
            if mine and member["sigma"] == 0:  # θ + 0·ε is θ: the last step of a schedule to σ = 0
                texts = self._constrained(lambda: self._batch(mine).chat(self.engine, sampling), mine)
                for r, c in zip(mine, texts):
                    out[r.slot] = c
            elif mine:
                owners.append((mine, member))
        # One call for all members: an engine pool spreads them over its engines.
        replies = self._constrained(lambda: self.engine.generate_members(
            [self._batch(mine).job(member, sampling) for mine, member in owners]), [r for m, _ in owners for r in m])
        for (mine, _), texts in zip(owners, replies if owners else []):
            for r, c in zip(mine, texts):
                out[r.slot] = c
        self.timing["generate_s"] += time.perf_counter() - began
        return sent, [c for c in out if c is not None]

    def _from_endpoint(self, base: list[Request], sampling: Sampling, out: list[Completion | None]) -> list[Request]:
        """The endpoint's replies to `base`, into `out` by slot; the requests as sent. A prompt its
        model cannot hold is leaned (LEAN) one part more (`_leaner`) and asked again, alone, until it fits: what
        `_fit` does before sending for an engine whose tokenizer we hold. Refused requests count as
        requests (they reached the endpoint); one still refused with all of LEAN left out stops the run."""
        sent = {r.slot: r for r in base}
        pending = base
        while pending:
            try:
                texts: list[Completion | None] = list(self._ask_endpoint(pending, sampling))
            except ContextLengthError as exc:
                if exc.replies is None or any(r.lean >= len(LEAN) for r, c in zip(pending, exc.replies) if c is None):
                    raise
                texts = exc.replies
            refused = [r for r, c in zip(pending, texts) if c is None]
            self.ledger.llm_requests += len(refused)
            self.refused_long += len(refused)
            for r, c in zip(pending, texts):
                if c is not None:
                    out[r.slot] = c
            pending = [self._leaner(r) for r in refused]
            sent.update((r.slot, r) for r in pending)
        return [sent[r.slot] for r in base]

    def _leaner(self, request: Request) -> Request:
        """`request` with the next LEAN part it shows left out: a level that leaves its prompt as it
        was (no failure report to drop) would only be refused again. At the last level, as it is."""
        shown, fewer = self._messages(request), request
        for level in range(request.lean + 1, len(LEAN) + 1):
            fewer = leaned(request, level)
            if self._messages(fewer) != shown:
                break
        return fewer

    def _ask_endpoint(self, requests: list[Request], sampling: Sampling) -> list[Completion]:
        """The endpoint's replies to `requests`; those a killed session was given for this step are served
        from answered.jsonl, not asked again, and each new one is kept there as it arrives (answered.py)."""
        early = self._early(requests) if self.overlap is not None else None
        endpoint = self.answered.serving(self.endpoint, self.asking, [r.slot for r in requests])
        try:
            return self._constrained(lambda: self._batch(requests).chat(endpoint, sampling, on_each=early),
                                     requests, reached=True)
        except ConstraintError as exc:
            # An endpoint that cannot constrain: free decoding from here on, recorded; the refused
            # requests count as requests (they reached the endpoint) but produced nothing.
            self.pattern, self.constrain_state = None, word_cut(f"off: the endpoint did not apply the decoding "
                                                               f"constraint, replies decode freely ({exc})", 300)
            refused = sent_before(exc, requests)
            self.ledger.llm_requests += refused
            self.event_log.append({"type": "constrain", "state": self.constrain_state, "requests": refused})
            return self._batch(requests).chat(endpoint, sampling, constrained=False, on_each=early)

    def _early(self, requests: list[Request]) -> Callable[[int, Completion], None]:
        """What the endpoint calls, from its threads, as the reply to requests[index] arrives: the program
        in it handed to the sandbox at once, unless the step will not score it (no code; a program seen
        before; a clone the step rejects). The step takes the parse from here (`_parsed_early`). Called
        from several threads at once; it only reads what the step changes after generation."""
        archive = [m.objective for m in self.method.members()]
        split, size = cascade.first_set(self.task, archive)
        overlap = self.overlap

        def arrived(index: int, completion: Completion) -> None:
            try:
                parsed = self._extract(requests[index], completion)
                overlap.parsed[id(completion)] = (completion, requests[index], parsed)
                if not isinstance(parsed, Extracted) or self._earlier(parsed.code)[:2] != (None, None):
                    return
                overlap.submit((parsed.code, self.task, split, size))
            except Exception:  # only an early start is lost: the step scores every program it keeps itself
                return
        return arrived

    def _parsed_early(self, request: Request, completion: Completion) -> Extracted | str:
        """`_extract`, or what the overlap hook already made of this very reply to this request."""
        early = self.overlap.parsed.get(id(completion)) if self.overlap is not None else None
        if early is not None and early[0] is completion and early[1] is request:
            return early[2]
        return self._extract(request, completion)

    def _log_prompts(self, step: int, conversations: list[list[dict]], analysts: bool = False) -> None:
        """[log] prompts: each request's messages by (step, slot), as the reply it got is found; a prompt
        sent before (a batch's shared one) is named by its sha256 only. Written once the replies are in,
        so a step a kill interrupted writes its prompts again on resume (readers keep the last). A skill
        refresh's analyst requests are marked `analyst` (their step proposes no candidates)."""
        if self.prompt_log is None:
            return
        for slot, messages in enumerate(conversations):
            digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()
            record = {"step": step, "slot": slot, "sha256": digest, **({"analyst": True} if analysts else {})}
            if digest not in self.prompts_written:
                self.prompts_written.add(digest)
                record["messages"] = messages
            self.prompt_log.append(record)

    def _batch(self, requests: list[Request]) -> Batch:
        """The generator call for these requests, each under its decoding pattern when decoding is
        constrained: the program pattern, or for an edit its parent's (edits.edit_pattern)."""
        patterns = [self._pattern(r) for r in requests]
        return Batch([self._messages(r) for r in requests], [r.seed for r in requests],
                     patterns if any(patterns) else None)

    def _constrained(self, generate: Callable[[], Any], requests: list[Request], reached: bool = False) -> Any:
        """`generate()`; if the engine or endpoint rejects a pattern while edits are constrained, edits
        decode freely from here on (an `edit_constrain` event, read back on resume) and it runs again.
        `reached`: the requests went to an endpoint, so the refused ones count as requests, as the program
        pattern's refusal counts them."""
        try:
            return generate() if requests else []
        except ConstraintError as exc:
            if not (self.edit_patterns and any(self._pattern(r) and _answers(r) == "blocks" for r in requests)):
                raise
            self.edit_patterns = False
            refused = sent_before(exc, requests) if reached else 0
            self.ledger.llm_requests += refused
            self.event_log.append({"type": "edit_constrain", "state": f"off: {exc}"[:300], "requests": refused})
            return generate()

    def _pattern(self, request: Request) -> str | None:
        if self.pattern is None:  # context.constrain off, or the template or endpoint cannot be constrained
            return None
        if _answers(request) == "blocks":
            return edit_pattern(request.parents[0].code or "") if self.edit_patterns else None
        return self.pattern

    def _extract(self, request: Request, completion: Completion) -> Extracted | str:
        """The program in a reply, parsed once per reply; or why there is none (the candidate's
        message): an edit reply's blocks applied to its parent (coevolve/search/edits.py). A reply
        that ended at sampling.max_tokens says so, in its repairs or its message: the parser keeps
        what parses of a cut-off program, so a run scores it, and the user should know."""
        parsed = self._program(request, completion)
        if completion.finish_reason != "length":
            return parsed
        if isinstance(parsed, Extracted):
            return replace(parsed, repairs=parsed.repairs + (CUT_OFF,))
        if parsed == NO_CODE:
            return NO_CODE_CUT_OFF
        # an edit left open asks whether the answer was cut off (edits.py): here it is known
        return f"{parsed.removesuffix(' (was the answer cut off?)')} (the reply was {CUT_OFF})"

    def _program(self, request: Request, completion: Completion) -> Extracted | str:
        t = self.task
        if _answers(request) == "blocks":
            try:
                return edited(completion.text, request.parents[0].code or "", t.function_name, t.template,
                              self.instructions)
            except EditError as exc:
                return f"the edit did not apply: {exc}"
        return extract(completion.text, t.function_name, t.template, self.instructions) or NO_CODE

    @cached_property
    def instructions(self) -> tuple[str, ...]:
        # the prompts' own instructions: a small model echoes "{your idea in one sentence}, then ..." as its idea
        return prompt_instructions(self.task.function_name)

    def _reask(self, step: int, requests: list[Request], members: list[dict], sampling: Sampling,
               completions: list[Completion], parsed: list[Extracted | str]) -> dict[str, list[dict]]:
        """[accounting]: ask again, free of T, for each reply with no parseable code (up to
        parse_retries times) and each program that clones the template or an earlier candidate
        (up to clone_retries times): same prompt, same weights, a fresh seed. `completions` and
        `parsed` end with each slot's last reply and its program, and `requests` with the request
        it answers (an endpoint may have leaned a re-ask further). Returns the replies replaced,
        by reason ("parse", "clone"), for the ledger and the event log."""
        limits = {"parse": self.config.accounting.parse_retries, "clone": self.config.accounting.clone_retries}
        replaced: dict[str, list[dict]] = {kind: [] for kind in REASKS}
        for attempt in range(1, max(limits.values()) + 1):
            why = {r.slot: kind for r, code in zip(requests, parsed)
                   for kind in [self._reask_reason(code)] if kind is not None and attempt <= limits[kind]}
            if not why:
                break
            failed = [r for r in requests if r.slot in why]
            # as leaned as the request it replaces (the prompt that did not fit once would not fit again)
            again = [replace(r, slot=i, seed=request_seed(self.config.run.seed, step, attempt * len(requests) + r.slot))
                     for i, r in enumerate(failed)]
            for r, sent, c in zip(failed, *self._generate(again, members, sampling)):
                if sent.lean > r.lean:  # refused as leaned before: the slot's candidate was shown this prompt
                    r = requests[r.slot] = leaned(r, sent.lean)
                replaced[why[r.slot]].append(completion_record(completions[r.slot]))
                completions[r.slot], parsed[r.slot] = c, self._extract(r, c)
        return replaced

    def _reask_reason(self, parsed: Extracted | str) -> str | None:
        if not isinstance(parsed, Extracted):
            return "parse"
        fp = fingerprint(parsed.code) if self.clones is not None else None
        return "clone" if fp is not None and self.clones.find(fp) is not None else None

    def _candidate(self, step: int, request: Request, parsed: Extracted | str, members: list[dict],
                   model: str = "") -> Candidate:
        if request.member is not None:
            member = members[request.member]
            state = {"kind": "perturbed", "seed": member["seed"], "sigma": member["sigma"],
                     "member": member["index"], "es_generation": self.es_updates}
        elif self.endpoint is not None:
            state = {"kind": "endpoint", "model": model or self.config.endpoint.model}  # an ensemble's pick
        else:
            state = {"kind": "base", "es_generation": self.es_updates}
        candidate = Candidate(id=0, step=step, operator=request.operator, parents=[p.id for p in request.parents],
                              model_state=state, skill_version=request.skill,
                              failures_shown=list(request.failures_shown))
        if not isinstance(parsed, Extracted):
            candidate.failure, candidate.message = "parse", parsed
            candidate.id = self.ledger.charge("parse")
        else:
            candidate.code, candidate.idea, candidate.repairs = parsed.code, parsed.idea, list(parsed.repairs)
            clone_of, original, fp = self._earlier(parsed.code)
            if clone_of is not None:
                # rejected before the sandbox: charged as the request it was, never scored
                candidate.duplicate_of, candidate.failure = clone_of, "duplicate"
                candidate.message = ("a clone of the task template" if clone_of == 0
                                     else f"a clone of candidate {clone_of}")
                candidate.id = self.ledger.charge("rejected")
            elif original is not None:
                candidate.duplicate_of = original.id
                candidate.id = self.ledger.charge("duplicate")
            else:
                candidate.id = self.ledger.charge("evaluated")
                self.code_seen[parsed.code] = candidate
                if fp is not None:
                    self.clones.add(candidate.id, fp)
        self.candidates.append(candidate)
        self.by_id[candidate.id] = candidate
        return candidate

    def _earlier(self, code: str) -> tuple[int | None, Candidate | None, Any]:
        """What the run has already seen of a program: the id of the program it clones when clones are
        rejected (context.fingerprint; 0: the template), else the candidate with the same text; and its
        fingerprint (None when clones are not tracked or the code does not parse)."""
        original = self.code_seen.get(code) if not self.reject_clones else None
        fp = fingerprint(code) if self.clones is not None else None
        clone_of = self.clones.find(fp) if fp is not None and self.reject_clones else None
        return clone_of, original, fp

    def _evaluate(self, candidates: list[Candidate]) -> list[Evaluation]:
        """Score each new program once; duplicates and parse failures need no sandbox."""
        began = time.perf_counter()
        fresh = [c for c in candidates if c.code is not None and c.duplicate_of is None and c.failure is None]
        # through the task's evaluation cascade, when it declares one (coevolve/search/cascade.py)
        scored = cascade.evaluate_many(self.overlap or self.evaluator, self.task, [c.code for c in fresh],
                                       [m.objective for m in self.method.members()])
        by_id = {c.id: logged_result(r) for c, r in zip(fresh, scored)}
        self.timing["evaluate_s"] += time.perf_counter() - began
        results = []
        for c in candidates:
            if c.code is None:
                results.append(Evaluation(failure="parse", message=c.message or NO_CODE))
            elif c.failure == "duplicate":  # a rejected clone
                results.append(Evaluation(failure="duplicate", message=c.message))
            elif c.duplicate_of is not None:
                results.append(Evaluation(duplicate_of=c.duplicate_of))
            else:
                results.append(by_id[c.id])
        return results

    def _settle(self, candidate: Candidate, result: Evaluation) -> None:
        original = self.by_id[result.duplicate_of] if result.duplicate_of is not None else None
        candidate.settle(result, original)
        self.progress.used = self.ledger.used
        if candidate.valid:
            self.progress.valid += 1
            if self.progress.best is None or (candidate.objective < self.progress.best
                                              if self.task.direction == "min"
                                              else candidate.objective > self.progress.best):
                self.progress.best = candidate.objective

    # ES -------------------------------------------------------------------------
    def _ask(self, count: int, generation: int) -> list[dict]:
        step = None
        if self.config.es.sigma_steps == "generation" and generation in self.sigma_generations:
            step = self.sigma_generations.index(generation)
        members = self.es.ask(step)[:count]
        return [{"index": m.index, "seed": m.seed, "sigma": m.sigma} for m in members]

    def _rewards(self, step: int, candidates: list[Candidate], requests: list[Request], members: list[dict]) -> dict:
        direction = self.task.direction
        reward_cfg = self.config.reward
        if reward_cfg.kind == "paper":
            rewards = self.method.paper_rewards([c.objective for c in candidates], [r.parents for r in requests],
                                                reward_cfg.floor)
        else:
            population_ref = median([m.objective for m in self.method.members()])
            step_ref = median([c.objective for c in candidates if c.valid])
            rewards = []
            for candidate, request in zip(candidates, requests):
                scored = [p.objective for p in request.parents if p.valid]  # a repair's parent failed
                if scored:
                    reference = sum(scored) / len(scored)
                else:
                    reference = population_ref if population_ref is not None else step_ref
                rewards.append(candidate_reward(candidate, reference, direction, reward_cfg))
        for candidate, reward in zip(candidates, rewards):
            candidate.reward = reward
        per_member = member_rewards(rewards, [r.member for r in requests])
        return {"generation": self.es.generation, "step": step,
                "members": members, "rewards": [per_member[i] for i in range(len(members))]}

    def _tell(self, es_record: dict, members: list[dict]) -> None:
        self.progress.sigma = abs(members[0]["sigma"]) if members else None
        if es_record["generation"] < self.es.generation:
            self.es_updates += 1
            return  # already in history.jsonl (replayed by ESOpt.resume)
        began = time.perf_counter()
        self.es.tell(self.engine, [Member(**m) for m in members], es_record["rewards"],
                     extra={"step": es_record.get("step"), "source": "coevolve.search"})
        self.es_updates += 1
        self.timing["es_update_s"] += time.perf_counter() - began

    # reporting --------------------------------------------------------------------
    def _report(self, event: dict, replayed: bool = False) -> None:
        self.progress.replayed = replayed
        self.progress.skill, self.progress.trial = self.versions.current, self.versions.challenger
        self.progress.refreshed = event.get("skill") is not None
        if self.on_progress is not None:
            self.on_progress(self.progress)

    def _finish(self) -> SearchSummary:
        cfg, task = self.config, self.task
        direction = task.direction
        best = self.method.best()
        valid = [c for c in self.candidates if c.valid]
        curve = best_so_far([(c.id, c.objective) for c in valid], direction)
        failures = Counter(c.failure for c in self.candidates if c.failure)
        split, size = task.train
        reference, unusable = self._reference(split, size)
        gap = None
        if best is not None and reference is not None and reference != 0:
            diff = best.objective - reference if direction == "min" else reference - best.objective
            gap = diff / abs(reference)
        summary = SearchSummary(
            method=cfg.run.method, task=task.name, seed=cfg.run.seed, budget=cfg.run.budget,
            outside_budget=self.method.outside_budget(),
            evaluations=self.ledger.used, ledger=self.ledger.to_dict(),
            valid=len(valid), valid_rate=len(valid) / self.ledger.used if self.ledger.used else 0.0,
            distinct_valid=sum(c.duplicate_of is None for c in valid),
            failures=dict(sorted(failures.items())),
            # what bounded the candidates: confinement, file-system view, memory limit (cgroup or rlimit)
            sandbox=getattr(self.evaluator, "boundary", None),
            train={"split": split, "size": size, "direction": direction, "reference": reference,
                   # why there is none, where reference() gave none usable (the dashboard shows it)
                   **({"reference_problem": unusable} if unusable else {})},
            best=None if best is None else {
                "id": best.id, "objective": best.objective, "gap": gap, "operator": best.operator,
                "step": best.step, "idea": best.idea, "model_state": best.model_state},
            best_so_far=curve,
            population=[c.id for c in self.method.ranked()],
            context=self._context_summary(),
            stopped=self.stopped,
            es=None if self.es is None else {"updates": self.es_updates, "generation": self.es.generation,
                                             "flat": self.es.flat,
                                             "checksum": self.engine.checksum(),
                                             # low-rank mode: which parameters ES covered and froze
                                             **self.engine.noise_info()},
        )
        write_record(self.store.path("summary.json"), summary)
        self._write_genealogy()
        if best is not None:
            write_best(self.store, summary, best.code)
        plot_run_progress(summary, self.store.path("progress.png"))
        return summary

    def _context_summary(self) -> dict:
        """What the context did: decoding, rejections, parser repairs, skill
        versions, valid rate per phase (base-weight vs ES-perturbed proposals)
        and the template's own score, to say whether anything beat it."""
        phases: dict[str, dict] = {}
        for c in self.candidates:
            phase = phases.setdefault("ES generations" if c.model_state["kind"] == "perturbed" else "prompt steps",
                                      {"candidates": 0, "valid": 0})
            phase["candidates"] += 1
            phase["valid"] += c.valid
        # the seed's sandbox score when there is one (the same scoring as the candidates'), else computed here
        seed = self.seed_program
        template = seed.objective if seed is not None and seed.valid else self._template_objective()
        best = self.method.best()
        beat = None
        if template is not None:
            beat = best is not None and (best.objective < template if self.task.direction == "min"
                                         else best.objective > template)
        repaired = Counter(r.split(" ")[0] for c in self.candidates for r in c.repairs if r != CUT_OFF)
        # requests the plan gave an operator that builds on parents, asked parentless (i1) for want of any:
        # all of them means the run searched as Sample does, whatever its method
        start = operators.start_operator()
        steps = max((c.step for c in self.candidates), default=-1) + 1  # a plan may go on past the budget
        planned = {step: spec.operator for step, spec in enumerate(itertools.islice(self.method.plan(), steps))}
        with_parents = [c for c in self.candidates
                        if c.id > 0 and not operators.get(planned.get(c.step, start)).parentless]
        # a program from a cut-off reply carries the repair; a reply that gave none says so in its message
        cut = [c for c in self.candidates if CUT_OFF in c.repairs or (c.failure == "parse" and CUT_OFF in c.message)]
        return {"constrain": self.constrain_state, "fingerprint": self.reject_clones,
                "rejected": sum(c.failure == "duplicate" for c in self.candidates),
                "rejected_template": sum(c.failure == "duplicate" and c.duplicate_of == 0 for c in self.candidates),
                "parser_repairs": dict(sorted(repaired.items())),
                "parentless": {"requests": sum(c.operator == start for c in with_parents),
                               "asked": len(with_parents)},
                # requests whose prompt left parts out to fit the engine's context (LEAN), of the run's
                "leaned": {"requests": self.leaned, "max_len": self.config.model.max_len,
                           "refused": self.refused_long},  # (the endpoint's refusals of prompts it led to)
                # each program scored under this many seeds of its generators, the mean kept ([sandbox] seeds)
                "scoring_seeds": self.config.sandbox.seeds,
                # replies that ended at sampling.max_tokens, and how many of them still scored
                "cut_off": {"replies": len(cut), "valid": sum(c.valid for c in cut),
                            "max_tokens": self.config.sampling.max_tokens},
                # the skill analysts' replies that ended at skill.max_tokens (the ledger's distill outcome: all of them)
                "analysts_cut_off": self.analysts_cut,
                # requests shown a failure, and how many replies were that failed program again
                "failures_repeated": failures_repeated(self.candidates, self._pool()),
                "repair_requests": sum(_repairs(c) for c in self.candidates),
                "repaired_valid": sum(_repairs(c) and c.valid for c in self.candidates),
                "phases": phases, "template_objective": template, "beat_template": beat,
                # the template as the archive's seed: its sandbox score (None: not seeded)
                "seed": None if seed is None else {"id": seed.id, "objective": seed.objective, "failure": seed.failure},
                # [start] programs: each one's file and sandbox score
                "start_programs": [{"id": c.id, "path": c.model_state["path"], "objective": c.objective,
                                    "failure": c.failure} for c in self.start_programs],
                "skill_versions": self.skill_versions, "skill_start": self.skill_start,
                # skill.keep = "judged": each trial, and the one still running at the end, judged as it stands
                "skill_trials": self.versions.trials + [{**t, "final": True} for t in [
                    self.versions.standing(self._pool(), self._last_step(), self.task.direction)] if t],
                # valid candidates that carry the task's own note (a task with `feedback`)
                "task_notes": sum(bool(c.feedback) for c in self.candidates if c.valid),
                "proposers": self._proposers(),
                "edits": self._edits(),
                "spend": round(self.spend, 6) if self.config.caps.prices else None,
                **({"tie_break": self._ties()} if self.config.eoh.tie_break else {}),
                **({"extended": self.extensions} if self.extensions else {})}

    def _ties(self) -> dict[str, Any]:
        """[eoh] tie_break: the tie-breaks, and how many other programs (proposed or seeded, repeats not
        counted) had the best's objective: what the best won them over."""
        best, decimals = self.method.best(), self.config.eoh.dedup_decimals
        tied = 0 if best is None else sum(
            1 for c in self._pool() if c.valid and c.duplicate_of is None and c.id != best.id
            and dedup_key(c.objective, decimals) == dedup_key(best.objective, decimals))
        return {"ties": list(self.config.eoh.tie_break), "tied": tied}

    def _edits(self) -> dict[str, int]:
        """Edit answers (the `diff` operator): how many were asked for, applied as blocks, answered with a
        whole program instead, or could not be applied; and how many of them scored ({} with none)."""
        mine = [c for c in self.candidates if operators.answer_of(c.operator) == "blocks"]
        if not mine:
            return {}
        whole = sum(WHOLE in c.repairs for c in mine)
        failed = sum(c.failure == "parse" for c in mine)
        return {"requests": len(mine), "applied": len(mine) - whole - failed, "whole": whole, "failed": failed,
                "valid": sum(c.valid for c in mine)}

    def _proposers(self) -> dict[str, dict[str, Any]]:
        """An endpoint ensemble's share: per model, the candidates it wrote, how many were valid and how
        many beat their parents, and (adaptive) the weight its next request would be drawn by ({} without
        an ensemble)."""
        if len(self.config.endpoint.choices) < 2:
            return {}
        found: dict[str, dict[str, Any]] = self._ensemble_record()
        if self.config.endpoint.select == "adaptive":
            for name, weight in ensemble.adaptive_weights(self.config.endpoint.choices, found).items():
                found[name]["weight"] = weight
        return found

    def _ensemble_record(self) -> dict[str, dict[str, int]]:
        return ensemble.record(self._pool(), self.config.endpoint.choices, self.task.direction)

    def _last_step(self) -> int:
        """The last step run so far: a candidate's, or a skill refresh's (it has no candidates)."""
        return max([c.step for c in self.candidates] + [v["step"] for v in self.skill_versions], default=0)

    def _pool(self) -> list[Candidate]:
        """Every candidate a child may name as a parent: the seeded programs too."""
        return self._seeds() + self.candidates

    def _reweight(self) -> dict[str, float] | None:
        """An adaptive ensemble's weights for the next step, from the candidates so far, set on the
        endpoint (None: fixed weights)."""
        section = self.config.endpoint
        if self.endpoint is None or section.select != "adaptive":
            return None
        weights = ensemble.adaptive_weights(section.choices, self._ensemble_record())
        self.endpoint.reweight(weights)
        return weights

    def _template_objective(self) -> float | None:
        """The template's train objective, computed here (our own code, not a
        candidate: no sandbox, no budget); None for tasks that cannot say."""
        if self.template_runs is None:
            return None
        runs = self.template_runs
        try:
            with guarded("the template's score() on {} {}".format(*self.task.train)):
                values = [self.task.score(*run) for run in runs]
        except Exception:  # a task without in-process scoring (the fakes)
            return None
        value = math.fsum(float(getattr(v, "objective", v)) for v in values) / len(values)
        return value if math.isfinite(value) else None

    def _reference(self, split: str, size: int) -> tuple[float | None, str]:
        """The task's reference value on (split, size) and "", or None and why there is none to use: its
        reference() raised or returned no Reference (checked_reference), which costs the run its gap, never
        its summary and best.py; the summary keeps why (train.reference_problem) and the run table says it.
        reference() that exits still stops the run with its one line (coevolve.cli), its steps kept."""
        reference, problem = checked_reference(self.task, split, size)
        return (None if reference is None else reference.value), problem

    def _write_genealogy(self) -> None:
        import networkx as nx  # heavy, only when the run ends

        graph = nx.DiGraph()
        for c in self._seeds() + self.candidates:
            graph.add_node(c.id, operator=c.operator, step=c.step, objective=c.objective, failure=c.failure,
                           model=c.model_state["kind"], duplicate_of=c.duplicate_of)
            for parent in c.parents:
                graph.add_edge(parent, c.id)
        atomic_write_json(self.store.path("genealogy.json"), nx.node_link_data(graph, edges="links"))


class _Replaying:
    """The engine, endpoint and sandbox of a finished run's replay (rebuild_derived): every step is in
    the log, so nothing is asked or scored; one that would be is a bug of the replay."""

    streams = False

    def chat(self, *args: Any, **kwargs: Any) -> list[Completion]:
        raise AssertionError("a finished run's replay asked a request its log should hold")

    def evaluate_many(self, items: Sequence[tuple[str, Any, str, int]]) -> list[EvalResult]:
        raise AssertionError("a finished run's replay scored a program its log should hold")


def _unreadable_json(path: Path) -> bool:
    """A derived JSON file that is missing or damaged (the atomic write leaves no half file)."""
    try:
        return read_json(path) is None
    except CorruptFileError:
        return True


def damaged_derived(store: RunStore, events: list[dict]) -> list[Path]:
    """The files a finished run derived from its log (`events`) that are missing or incomplete:
    candidates.jsonl holding another number of candidates than the log scored, genealogy.json, a
    logged step's population snapshot."""
    damaged = []
    held = read_jsonl(store.candidates_path) if store.candidates_path.exists() else None
    if held is None or len(held) != scored_candidates(events):
        damaged.append(store.candidates_path)
    damaged += [path for path in [store.path("genealogy.json")] if _unreadable_json(path)]
    steps = sorted(e["step"] for e in events if e.get("type") == "step")
    return damaged + [store.population_path(s) for s in steps if _unreadable_json(store.population_path(s))]


def rebuild_derived(store: RunStore, config: RunConfig, events: list[dict], task: Callable[[], Any]) -> str | None:
    """`--resume` of a finished run (its log: `events`) writes again the derived files it lost
    (damaged_derived): the run is replayed from its log in a scratch directory, asking and scoring
    nothing, and the damaged files are copied back, the bytes the run wrote. `task`: the run's task,
    loaded only then. Returns the one line saying so (starting "not rebuilt" where it could not), or
    None when nothing was damaged. best.py is restore_best's: call this first, since candidates.jsonl
    may hold its code."""
    damaged = damaged_derived(store, events)
    if not damaged:
        return None
    names = [str(p.relative_to(store.dir)) for p in damaged]
    said = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    if config.uses_es:
        return (f"not rebuilt: {said} of {store.dir}: a run with ES replays its log only with its engine, which "
                "the resume of a finished run does not load")
    with tempfile.TemporaryDirectory(prefix="coevolve-replay-") as scratch:
        work = RunStore(scratch)
        for path in (store.config_path, store.events_path):  # what the replay reads: the run's own
            atomic_write_bytes(work.dir / path.name, path.read_bytes())
        replaying = _Replaying()
        try:
            endpoint = replaying if config.endpoint.base_url else None  # the candidates' model_state says which
            SearchLoop(config, work, replaying, replaying, task(), endpoint=endpoint, on_note=lambda line: None).run()
        except UsageError as exc:  # its log or config.toml does not replay: the scratch copy named as the run
            return f"not rebuilt: {said}: {str(exc).replace(scratch, str(store.dir))}"
        try:
            for path in damaged:
                atomic_write_bytes(path, (work.dir / path.relative_to(store.dir)).read_bytes())
        except OSError as exc:  # e.g. a read-only copy of the run
            return f"not rebuilt: cannot write {path}: {exc.strerror or exc}"
    were = "was" if len(names) == 1 else "were"
    return f"{said} of {store.dir} {were} missing or incomplete: written again from its log"


def wall_before(store: RunStore) -> float:
    """The wall-clock seconds of a run's earlier sessions (clock.json), 0 before any; a damaged
    clock.json is a UsageError of one line saying what it holds and how to go on. It is not derived
    from the log (the log's steps must be the same run to run), so it cannot be rebuilt."""
    clock = store.path("clock.json")
    try:
        data = read_json(clock)
        seconds = 0.0 if data is None else float(data["wall_s"])
    except (CorruptFileError, KeyError, TypeError, ValueError) as exc:
        why = str(exc) if isinstance(exc, CorruptFileError) else f"{clock} holds no number under wall_s"
        raise UsageError(f"{why}: it holds only the wall-clock seconds of the run's earlier sessions, which "
                         f"caps.wall_s counts; delete it and resume again to go on (those seconds then count "
                         f"as 0)") from None
    return seconds


def write_best(store: RunStore, summary: SearchSummary, code: str) -> None:
    """best.py: the code of the best candidate `summary` names, under a header saying what it is. The
    run writes it as it ends; `coevolve run --resume` of a finished run writes it again where it is gone
    (restore_best), the same bytes."""
    best = summary.best
    assert best is not None
    header = (f"# best of {summary.method} on {summary.task} (seed {summary.seed}): objective {best.objective!r}"
              f" on {summary.train.split}{summary.train.size}, candidate {best.id}"
              + (" (the task's template, seeded: no proposal beat it)" if best.id == 0
                 else f" (starting program {best.model_state.get('path')}: no proposal beat it)"
                 if best.id < 0 else "")
              + f"\n# idea: {best.idea or '-'}\n")
    atomic_write_text(store.path("best.py"), header + code.rstrip() + "\n")


def sent_before(exc: BaseException, requests: list[Request]) -> int:
    """How many of a call's requests reached the endpoint before it failed: an endpoint stops sending at the
    first failure (openai_client's `requests_sent`); all of them where the generator does not say."""
    return int(getattr(exc, "requests_sent", len(requests)))


def restore_best(store: RunStore, summary: SearchSummary, events: list[dict],
                 template: Callable[[], str]) -> str | None:
    """Write again the best.py a finished run lost (its summary names a best, the file is gone), from what
    the run kept of that program: a candidate's code from candidates.jsonl (taken only where its record
    scores what the summary says, so a damaged file is not trusted), a starting program's from its "seed"
    event, the template from the task (`template`, called only then). Returns where the code came from, or
    why it was not restored (a line starting "not restored"); None when nothing was missing."""
    best = summary.best
    if best is None or store.path("best.py").exists():
        return None
    if best.id == 0:
        code, source = template(), "the task's template"
    else:  # the rule `coevolve report` uses to say whether a resume can write it again
        code = kept_best_code(store, events, best.id, best.objective)
        source = "its seed event in events.jsonl" if best.id < 0 else \
            f"candidate {best.id}'s code in {store.candidates_path.name}"
    if not isinstance(code, str):
        where = "its seed event" if best.id < 0 else f"{store.candidates_path.name} as it scored"
        return (f"not restored: {store.path('best.py')} is missing and candidate {best.id}, the best summary.json "
                f"names, is not in {where}: nothing the run kept holds its code")
    write_best(store, summary, code)
    return source


def write_config(config: RunConfig) -> str:
    return dump_toml(as_dict(config))
