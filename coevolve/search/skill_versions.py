"""The versions of a heuristic run's skill, and which one each request shows.

A run keeps every version it writes (v000: `skill.start`'s; vNNN: a Trace2Skill
refresh's) besides "no skill" (None). One is current: the one analysts patch.
Under `skill.keep = "latest"` each new version becomes current at once; under
`"judged"` it goes on trial against the current one: requests alternate between
the two by evaluation number (an ES generation's members all see one, generations
alternating from the trial's first) until the next refresh judges them
(`coevolve.search.skill.judge`) and the one kept becomes current. Which side a
request shows depends on its number alone, and a generation's on its number and the
generation its trial began at (given to `add`), so asking again, out of order or
after a resume gives the sides of an uninterrupted run.

The loop drives this with the versions it writes; the dashboard drives it with
the versions and verdicts a run's log holds (no texts), to show the trial still
open. Files, budget and the log stay with the loop.
"""

from __future__ import annotations

from typing import Any, Sequence

from coevolve.base.skills import Skill
from coevolve.search.population import Candidate
from coevolve.search.skill import judge, outline


class SkillVersions:
    def __init__(self, judged: bool, generations_from_trial: bool = True) -> None:
        self.judged = judged
        # False: ES generations alternate counted from the run's first, the rule of runs whose start event
        # predates it (search.loop.RULES: their logged steps replay only under it)
        self.generations_from_trial = generations_from_trial
        # each version with its outline, rendered once: what a prompt shows of it ("" for no skill)
        self._kept: dict[int | None, tuple[Skill | None, str]] = {None: (None, "")}
        self.current: int | None = None
        self.challenger: int | None = None  # the version on trial (judged only)
        self.since = 0  # the trial counts the children proposed after this step
        # the trial's first ES generation: the number of generations the run made before it began (None: not
        # recorded by the caller, see for_generation)
        self.first_generation: int | None = None
        self.trials: list[dict[str, Any]] = []  # the verdicts of the refreshes, in order

    def add(self, version: int, skill: Skill | None, step: int, generation: int | None = None) -> None:
        """A version written at `step` (v000: step -1, before the first): current from the next request
        ("latest"), or on trial against the current one ("judged"). `skill` None: a version known by its
        number only (a log read back). `generation`: the ES generations the run made before `step`, so
        the trial's first generation is that number (None for a caller that asks no generation's side,
        e.g. the dashboard)."""
        self._kept[version] = (skill, "" if skill is None else outline(skill))
        if self.judged:
            self.challenger, self.since, self.first_generation = version, step, generation
        else:
            self.current = version

    @property
    def skill(self) -> Skill | None:
        return self._kept[self.current][0]

    @property
    def outline(self) -> str:
        """What analysts see of the current skill (for no skill, an outline saying there is none)."""
        skill, text = self._kept[self.current]
        return text if skill is not None else outline(None)

    def shown(self, version: int | None) -> str:
        """What a request's prompt shows of `version` ("" for no skill)."""
        return self._kept[version][1]

    def for_request(self, evaluation: int) -> int | None:
        """The version the request charged as `evaluation` shows: with a version on trial, every other
        one (even numbers) shows the challenger, so a step of one request alternates too."""
        if self.challenger is None or evaluation % 2:
            return self.current
        return self.challenger

    def for_generation(self, generation: int) -> int | None:
        """The version every request of ES generation `generation` shows: one for all its members, since
        ES compares their weights and z-scores their rewards against each other. Generations alternate
        from the trial's first (recorded by `add`), which shows the challenger: counted from the run's
        first instead, a trial whose only ES generation fell on an odd one never showed its challenger.
        The same answer however often and in whatever order it is asked."""
        if self.challenger is None:
            return self.current
        if not self.generations_from_trial:
            return self.for_request(generation)
        if self.first_generation is None:
            raise ValueError("for_generation needs the generation the trial began at: give it to add()")
        return self.current if (generation - self.first_generation) % 2 else self.challenger

    def standing(self, pool: Sequence[Candidate], step: int | None, direction: str,
                 seed: float | None = None) -> dict[str, Any] | None:
        """The open trial as it stands (None: nothing on trial); changes nothing. `pool`: every candidate
        a child may name as a parent (`seed`: the seeded template's objective, where it holds none)."""
        if self.challenger is None:
            return None
        return {"step": step, **judge(pool, self.current, self.challenger, self.since, direction, seed)}

    def settle(self, kept: int | None, trial: dict[str, Any] | None = None) -> None:
        """A refresh's verdict: `kept` becomes current and the trial ends."""
        self.current, self.challenger = kept, None
        if trial is not None:
            self.trials.append(trial)

    def judge(self, pool: Sequence[Candidate], step: int, direction: str) -> dict[str, Any] | None:
        """At a refresh: the open trial judged and settled (None: nothing was on trial)."""
        trial = self.standing(pool, step, direction)
        if trial is not None:
            self.settle(trial["kept"], trial)
        return trial
