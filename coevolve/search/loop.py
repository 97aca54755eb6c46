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
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from coevolve.base.config import as_dict, dump_toml
from coevolve.engine.base import Completion, Generator, MemberJob, Sampling, WeightEngine
from coevolve.runstore import JsonlWriter, RunStore, atomic_write_json, atomic_write_text, same_settings
from coevolve.search.ledger import Ledger
from coevolve.search.methods import (Method, StepSpec, es_population, make_method, members_for, outside_budget,
                                     planned_es_generations, planned_steps)
from coevolve.search.plot import best_so_far, plot_best_so_far
from coevolve.search.population import Candidate, Population
from coevolve.search.prompts import operator_messages
from coevolve.search.reward import (candidate_reward, median, member_rewards, paper_eoh_rewards,
                                    paper_sample_rewards)
from coevolve.search.runconfig import RunConfig

EVENT_VERSION = 1


class Evaluator(Protocol):
    """coevolve.sandbox.Sandbox: scores (code, task, split, size) items in order."""

    def evaluate_many(self, items: Sequence[tuple[str, str, str, int]]) -> list[Any]: ...


def _renamed_sections(config: Any) -> Any:
    """A start event's config as today's sections name it: runs written before
    [proposer] became [endpoint] resume unchanged."""
    if isinstance(config, dict) and "proposer" in config and "endpoint" not in config:
        config = {("endpoint" if k == "proposer" else k): v for k, v in config.items()}
    return config


def request_seed(run_seed: int, step: int, slot: int) -> int:
    digest = hashlib.sha256(f"coevolve-request:{run_seed}:{step}:{slot}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def _failure_name(failure: Any) -> str | None:
    return None if failure is None else str(getattr(failure, "value", failure))


@dataclass
class Request:
    slot: int
    operator: str
    parents: list[Candidate]
    seed: int
    member: int | None  # index into the step's ES members; None: base weights


@dataclass
class Progress:
    """What the progress bar and the final table show."""

    used: int = 0
    valid: int = 0
    best: float | None = None
    sigma: float | None = None

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
    timing: dict = field(default_factory=lambda: Counter())

    def run(self) -> dict:
        started = time.perf_counter()
        cfg = self.config
        self.method: Method = make_method(cfg)
        self.ledger = Ledger(cfg.run.budget + outside_budget(cfg))
        pop_size = cfg.sample.population if cfg.run.method.startswith("sample") else cfg.eoh.population
        self.population = Population(pop_size, self.task.direction, decimals=cfg.eoh.dedup_decimals,
                                     with_replacement=cfg.eoh.parents_with_replacement)
        self.candidates: list[Candidate] = []
        self.code_seen: dict[str, Candidate] = {}
        self.progress = Progress()
        self.es = self._start_es() if cfg.uses_es else None
        self.es_updates = 0

        events = self.store.events()
        logged = {e["step"]: e for e in events if e.get("type") == "step"}
        self._check_start(events)
        sampling = cfg.sampling
        with self.store.event_writer() as event_log, JsonlWriter(self.store.candidates_path, truncate=True) as cand_log:
            if not events:
                event_log.append({"type": "start", "version": EVENT_VERSION, "config": as_dict(cfg)})
            for step, spec in enumerate(self.method.plan()):
                granted = self.ledger.grant(spec.count)
                if granted == 0:
                    break
                event = self._step(step, spec, granted, sampling, logged.get(step), event_log)
                for candidate in self.candidates[-granted:]:
                    cand_log.append(candidate.to_dict())
                atomic_write_json(self.store.population_path(step), {
                    "step": step, "operator": spec.operator, "evaluations": self.ledger.used,
                    "population": self.population.snapshot()})
                self._report(event)
            summary = self._finish()
            if not any(e.get("type") == "end" for e in events):
                event_log.append({"type": "end", "evaluations": self.ledger.used})
        self.timing["total_s"] = time.perf_counter() - started
        atomic_write_json(self.store.path("timing.json"), {k: round(v, 3) for k, v in self.timing.items()})
        return summary

    # set-up -------------------------------------------------------------------
    def _start_es(self) -> Any:
        from coevolve.es import ESOpt

        cfg = self.config
        budget = cfg.run.budget + outside_budget(cfg)
        generations = planned_es_generations(self.method, budget, cfg.es.proposals_per_member)
        # es.sigma_steps = "generation": the σ schedule steps once per plan generation
        # that holds an ES update (the reference's stepping), not once per update
        self.sigma_generations = sorted({s.generation for s in planned_steps(self.method, budget,
                                                                             cfg.es.proposals_per_member)
                                         if s.perturbed})
        if cfg.es.sigma_steps == "generation":
            generations = len(self.sigma_generations)
        es_cfg = cfg.es.resolve(population=es_population(cfg), generations=max(generations, 1))
        history = self.store.history_path
        if history.exists() and history.stat().st_size > 0:
            return ESOpt.resume(es_cfg, history, self.engine, seed=cfg.run.seed)
        return ESOpt(es_cfg, history, seed=cfg.run.seed)

    def _check_start(self, events: list[dict]) -> None:
        if not events:
            return
        start = events[0]
        if start.get("type") != "start" or start.get("version") != EVENT_VERSION:
            raise RuntimeError(f"{self.store.events_path}: first event is not a version-{EVENT_VERSION} start")
        if not same_settings(_renamed_sections(start.get("config")), as_dict(self.config)):
            raise RuntimeError(f"{self.store.events_path} was written under another config than "
                               f"{self.store.config_path}; refusing to mix them")

    # one step -----------------------------------------------------------------
    def _step(self, step: int, spec: StepSpec, granted: int, sampling: Sampling, logged: dict | None,
              event_log: JsonlWriter) -> dict:
        cfg = self.config
        per_member = cfg.es.proposals_per_member
        perturbed = spec.perturbed and members_for(granted, per_member) >= 2
        rng = np.random.default_rng([cfg.run.seed, step])
        requests = []
        for slot in range(granted):
            parents = self.method.parents(spec.operator, self.population, rng)
            operator = spec.operator if parents or spec.operator == "i1" else "i1"  # empty population
            requests.append(Request(slot, operator, parents, request_seed(cfg.run.seed, step, slot),
                                    slot // per_member if perturbed else None))
        if logged is not None:
            self._check_logged(step, logged, requests)
            members = logged["es"]["members"] if logged.get("es") else []
            completions = [Completion(**c) for c in logged["completions"]]
            retried = logged.get("parse_retries", [])
        else:
            members = self._ask(members_for(granted, per_member), spec.generation) if perturbed else []
            completions = self._generate(requests, members, sampling)
            retried = self._retry_unparsed(step, requests, members, sampling, completions)
        self.ledger.record_llm([Completion(**c) for c in retried])  # their tokens count, their texts do not
        self.ledger.parse_retries += len(retried)
        self.ledger.record_llm(completions)

        step_candidates = [self._candidate(step, request, completion, members)
                           for request, completion in zip(requests, completions)]
        results = logged["results"] if logged is not None else self._evaluate(step_candidates)
        for candidate, result in zip(step_candidates, results):
            self._settle(candidate, result)

        es_record = None
        if perturbed:
            es_record = self._rewards(step, step_candidates, requests, members)
            if logged is not None:
                es_record["generation"] = logged["es"]["generation"]
        event = {"type": "step", "step": step, "operator": spec.operator,
                 "requests": [{"slot": r.slot, "operator": r.operator, "parents": [p.id for p in r.parents],
                               "seed": r.seed, "member": r.member} for r in requests],
                 "completions": [{"text": c.text, "prompt_tokens": c.prompt_tokens,
                                  "completion_tokens": c.completion_tokens, "finish_reason": c.finish_reason,
                                  "retries": c.retries}
                                 for c in completions],
                 "results": results, "es": es_record}
        if retried:
            event["parse_retries"] = retried
        if logged is None:
            event_log.append(event)  # before the ES update: a kill in between re-applies it on resume
        if es_record is not None:
            self._tell(es_record, members)

        for candidate in step_candidates:
            if candidate.duplicate_of is None:
                self.population.add(candidate)
        self.population.survive()
        return event

    def _check_logged(self, step: int, logged: dict, requests: list[Request]) -> None:
        mine = [(r.slot, r.operator, [p.id for p in r.parents], r.seed) for r in requests]
        theirs = [(r["slot"], r["operator"], r["parents"], r["seed"]) for r in logged["requests"]]
        if mine != theirs:
            raise RuntimeError(f"{self.store.events_path}: step {step} does not replay the same requests; "
                               "the run directory was written by different code or config")

    def _messages(self, request: Request) -> list[dict]:
        from tasks.base import starting_program

        t = self.task
        start = starting_program(t, self.config.start.program)
        return operator_messages(request.operator, t.description, start, t.function_name, t.direction,
                                 request.parents, show_scores=self.config.eoh.show_scores)

    def _generate(self, requests: list[Request], members: list[dict], sampling: Sampling) -> list[Completion]:
        began = time.perf_counter()
        out: list[Completion | None] = [None] * len(requests)
        base = [r for r in requests if r.member is None]
        if base:
            generator = self.endpoint or self.engine
            texts = generator.chat([self._messages(r) for r in base], sampling, seeds=[r.seed for r in base])
            for r, c in zip(base, texts):
                out[r.slot] = c
        jobs, owners = [], []
        for index, member in enumerate(members):
            mine = [r for r in requests if r.member == index]
            if mine and member["sigma"] == 0:  # θ + 0·ε is θ: the last step of a schedule to σ = 0
                texts = self.engine.chat([self._messages(r) for r in mine], sampling, seeds=[r.seed for r in mine])
                for r, c in zip(mine, texts):
                    out[r.slot] = c
            elif mine:
                owners.append(mine)
                jobs.append(MemberJob(member["seed"], member["sigma"], [self._messages(r) for r in mine],
                                      sampling, [r.seed for r in mine]))
        # One call for all members: an engine pool spreads them over its engines.
        for mine, texts in zip(owners, self.engine.generate_members(jobs) if jobs else []):
            for r, c in zip(mine, texts):
                out[r.slot] = c
        self.timing["generate_s"] += time.perf_counter() - began
        return [c for c in out if c is not None]

    def _retry_unparsed(self, step: int, requests: list[Request], members: list[dict], sampling: Sampling,
                        completions: list[Completion]) -> list[dict]:
        """[accounting] parse_retries: ask again, free of T, for each reply with no
        parseable code (same prompt, same weights, a fresh seed), up to n times;
        `completions` ends with each slot's last reply. Returns the replies
        replaced, for the ledger and the event log."""
        from coevolve.codeparse import extract

        replaced: list[dict] = []
        t = self.task
        for attempt in range(1, self.config.accounting.parse_retries + 1):
            failed = [r for r, c in zip(requests, completions)
                      if extract(c.text, t.function_name, t.template) is None]
            if not failed:
                break
            again = [Request(i, r.operator, r.parents, request_seed(self.config.run.seed, step,
                                                                      attempt * len(requests) + r.slot), r.member)
                     for i, r in enumerate(failed)]
            for r, c in zip(failed, self._generate(again, members, sampling)):
                old = completions[r.slot]
                replaced.append({"text": old.text, "prompt_tokens": old.prompt_tokens,
                                 "completion_tokens": old.completion_tokens, "finish_reason": old.finish_reason})
                completions[r.slot] = c
        return replaced

    def _candidate(self, step: int, request: Request, completion: Completion, members: list[dict]) -> Candidate:
        from coevolve.codeparse import extract

        if request.member is not None:
            member = members[request.member]
            state = {"kind": "perturbed", "seed": member["seed"], "sigma": member["sigma"],
                     "member": member["index"], "es_generation": self.es_updates}
        elif self.endpoint is not None:
            state = {"kind": "endpoint", "model": self.config.endpoint.model}
        else:
            state = {"kind": "base", "es_generation": self.es_updates}
        parsed = extract(completion.text, self.task.function_name, self.task.template)
        candidate = Candidate(id=0, step=step, operator=request.operator, parents=[p.id for p in request.parents],
                              model_state=state)
        if parsed is None:
            candidate.failure = "parse"
            candidate.id = self.ledger.charge("parse")
        else:
            candidate.code, candidate.idea = parsed.code, parsed.idea
            original = self.code_seen.get(parsed.code)
            if original is not None:
                candidate.duplicate_of = original.id
                candidate.id = self.ledger.charge("duplicate")
            else:
                candidate.id = self.ledger.charge("evaluated")
                self.code_seen[parsed.code] = candidate
        self.candidates.append(candidate)
        return candidate

    def _evaluate(self, candidates: list[Candidate]) -> list[dict]:
        """Score each new program once; duplicates and parse failures need no sandbox."""
        began = time.perf_counter()
        split, size = self.task.train
        fresh = [c for c in candidates if c.code is not None and c.duplicate_of is None]
        scored = self.evaluator.evaluate_many([(c.code, self.task, split, size) for c in fresh]) if fresh else []
        by_id = {}
        for c, r in zip(fresh, scored):
            objective = getattr(r, "objective", None)
            ok = bool(getattr(r, "ok", objective is not None)) and objective is not None and math.isfinite(objective)
            by_id[c.id] = {"objective": float(objective) if ok else None,
                           "failure": None if ok else (_failure_name(getattr(r, "failure", None)) or "invalid"),
                           "message": str(getattr(r, "message", "") or "")[-2000:],
                           "seconds": float(getattr(r, "seconds", 0.0) or 0.0)}
        self.timing["evaluate_s"] += time.perf_counter() - began
        results = []
        for c in candidates:
            if c.code is None:
                results.append({"objective": None, "failure": "parse", "message": "no code found", "seconds": 0.0})
            elif c.duplicate_of is not None:
                results.append({"duplicate_of": c.duplicate_of})
            else:
                results.append(by_id[c.id])
        return results

    def _settle(self, candidate: Candidate, result: dict) -> None:
        if "duplicate_of" in result:
            original = next(c for c in self.candidates if c.id == result["duplicate_of"])
            candidate.objective, candidate.failure = original.objective, original.failure
            candidate.message, candidate.seconds = original.message, 0.0
        else:
            candidate.objective, candidate.failure = result["objective"], result["failure"]
            candidate.message, candidate.seconds = result["message"], result["seconds"]
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
            objectives = [c.objective for c in candidates]
            if self.config.run.method.startswith("sample"):
                rewards = paper_sample_rewards(objectives, direction)
            else:
                best_parent = [None if not r.parents else
                               (min if direction == "min" else max)(p.objective for p in r.parents)
                               for r in requests]
                rewards = paper_eoh_rewards(objectives, best_parent, [m.objective for m in self.population.members],
                                            direction, reward_cfg.floor)
        else:
            population_ref = median([m.objective for m in self.population.members])
            step_ref = median([c.objective for c in candidates if c.valid])
            rewards = []
            for candidate, request in zip(candidates, requests):
                if request.parents:
                    reference = sum(p.objective for p in request.parents) / len(request.parents)
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
        from coevolve.es import Member

        began = time.perf_counter()
        self.es.tell(self.engine, [Member(**m) for m in members], es_record["rewards"],
                     extra={"step": es_record.get("step"), "source": "coevolve.search"})
        self.es_updates += 1
        self.timing["es_update_s"] += time.perf_counter() - began

    # reporting --------------------------------------------------------------------
    def _report(self, event: dict) -> None:
        if self.on_progress is not None:
            self.on_progress(self.progress)

    def _finish(self) -> dict:
        cfg, task = self.config, self.task
        direction = task.direction
        best = self.population.best()
        valid = [c for c in self.candidates if c.valid]
        curve = best_so_far([(c.id, c.objective) for c in valid], direction)
        failures = Counter(c.failure for c in self.candidates if c.failure)
        split, size = task.train
        reference = self._reference(split, size)
        gap = None
        if best is not None and reference is not None and reference != 0:
            diff = best.objective - reference if direction == "min" else reference - best.objective
            gap = diff / abs(reference)
        summary = {
            "method": cfg.run.method, "task": task.name, "seed": cfg.run.seed, "budget": cfg.run.budget,
            "outside_budget": outside_budget(cfg),
            "evaluations": self.ledger.used, "ledger": self.ledger.to_dict(),
            "valid": len(valid), "valid_rate": len(valid) / self.ledger.used if self.ledger.used else 0.0,
            "failures": dict(sorted(failures.items())),
            # what bounded the candidates: confinement, file-system view, memory limit (cgroup or rlimit)
            "sandbox": getattr(self.evaluator, "boundary", None),
            "train": {"split": split, "size": size, "direction": direction, "reference": reference},
            "best": None if best is None else {
                "id": best.id, "objective": best.objective, "gap": gap, "operator": best.operator,
                "step": best.step, "idea": best.idea, "model_state": best.model_state},
            "best_so_far": [list(p) for p in curve],
            "population": [c.id for c in self.population.ranked()],
            "es": None if self.es is None else {"updates": self.es_updates, "generation": self.es.generation,
                                                "flat": self.es.flat,
                                                "checksum": self.engine.checksum(),
                                                # low-rank mode: which parameters ES covered and froze
                                                **self.engine.noise_info()},
        }
        atomic_write_json(self.store.path("summary.json"), summary)
        self._write_genealogy()
        if best is not None:
            header = (f"# best of {cfg.run.method} on {task.name} (seed {cfg.run.seed}): objective {best.objective!r}"
                      f" on {split}{size}, candidate {best.id}\n# idea: {best.idea or '-'}\n")
            atomic_write_text(self.store.path("best.py"), header + best.code.rstrip() + "\n")
        plot_best_so_far({cfg.run.method: curve}, self.store.path("progress.png"), budget=cfg.run.budget,
                         title=f"{task.name}, {cfg.run.method}, seed {cfg.run.seed}",
                         ylabel=f"best train objective ({'lower' if direction == 'min' else 'higher'} is better)")
        return summary

    def _reference(self, split: str, size: int) -> float | None:
        try:
            ref = self.task.reference(split, size)
        except NotImplementedError:
            return None
        return None if ref is None else float(getattr(ref, "value", ref))

    def _write_genealogy(self) -> None:
        import networkx as nx

        graph = nx.DiGraph()
        for c in self.candidates:
            graph.add_node(c.id, operator=c.operator, step=c.step, objective=c.objective, failure=c.failure,
                           model=c.model_state["kind"], duplicate_of=c.duplicate_of)
            for parent in c.parents:
                graph.add_edge(parent, c.id)
        atomic_write_json(self.store.path("genealogy.json"), nx.node_link_data(graph, edges="links"))


def write_config(config: RunConfig) -> str:
    return dump_toml(as_dict(config))
