"""Population-parallel ES over several engines, each a Ray actor.

ES needs only scalars to cross process or node boundaries: every engine can
regenerate any perturbation from its seed, and restore is exact, so an update
is applied everywhere from (seeds, coefficients) with no weight broadcast.
After an update the engines compare weight checksums; a mismatch stops the run
(`DivergenceError`) instead of letting members silently run on different models.

`EnginePool` offers the calls the search loop and `ESOpt` make on a single
`Engine` (chat, generate_members, perturbed, apply_update, checksum, reset,
device, num_parameters, close), so either can drive a pool unchanged.

Faults: an engine whose actor dies mid-call is dropped from the pool (logged)
and its unfinished work is re-run on the engines left. Each call returns exactly
one result per job, whichever engine produced it, so nothing is counted twice.
When no engine is left the pool raises `NoEnginesLeft`.
"""

from __future__ import annotations

import logging
import os
import socket
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from coevolve.base.sections import LOCAL, DistributedSection
from coevolve.engine import models
from coevolve.base.errors import UsageError
from coevolve.engine.base import check_requests, Completion, ContextLengthError, MemberJob, Message, Sampling
from coevolve.engine import vllm_engine  # as a module: tests stand a fake in for vllm_engine.Engine

log = logging.getLogger(__name__)


class PoolError(RuntimeError):
    pass


class DivergenceError(PoolError):
    """Engines that should hold identical weights do not."""


class NoEnginesLeft(PoolError):
    pass


def build_engine(model: str | Path | None, section: DistributedSection | None = None, **engine_kwargs: Any):
    """The engine a run asks for: an in-process `Engine` by default, an
    `EnginePool` when `[distributed]` asks for several engines or a cluster."""
    if section is None:
        return vllm_engine.Engine(model, **engine_kwargs)
    engine_kwargs["tensor_parallel_size"] = section.tensor_parallel_size
    if not section.uses_ray:
        return vllm_engine.Engine(model, **engine_kwargs)
    return EnginePool(section.engines, model, address=section.address, **engine_kwargs)


def core_groups(engines: int, cores: Sequence[int] | None = None) -> list[str]:
    """Split this machine's cores into one contiguous group per engine, written
    the way VLLM_CPU_OMP_THREADS_BIND reads them ("0-3", "4"). With more engines
    than cores, engines share cores round-robin (slow, but it runs)."""
    if engines < 1:
        raise ValueError(f"engines must be >= 1, got {engines}")
    cores = sorted(os.sched_getaffinity(0)) if cores is None else list(cores)
    if not cores:
        raise ValueError("no CPU cores available")
    if engines >= len(cores):
        return [str(cores[i % len(cores)]) for i in range(engines)]
    groups = []
    for i in range(engines):
        start, end = i * len(cores) // engines, (i + 1) * len(cores) // engines
        groups.append(",".join(str(c) for c in cores[start:end]))
    return groups


class _EngineHost:
    """Body of one engine actor. Ray makes it remote in `_actor_class`."""

    def __init__(self, model: str, env: dict[str, str], engine_kwargs: dict[str, Any]) -> None:
        # runtime_env sets these too; repeating them here covers clusters whose
        # runtime_env support is limited (Ray client) before vLLM is imported.
        os.environ.update(env)
        self.engine = vllm_engine.Engine(model, **engine_kwargs)

    def describe(self) -> dict[str, Any]:
        return {
            "device": self.engine.device,
            "dtype": self.engine.dtype,
            "num_parameters": self.engine.num_parameters(),
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "checksum": self.engine.checksum(),
            "noise_info": self.engine.noise_info(),
        }

    def call(self, method: str, *args: Any) -> Any:
        return getattr(self.engine, method)(*args)


# Ray turns a loopback node address into the machine's outside address unless
# it believes clusters are off; this flag (read by ray_constants) is the switch.
_RAY_CLUSTER_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def start_local_ray(num_cpus: int) -> None:
    """A private Ray cluster whose servers listen on 127.0.0.1 only.

    `_node_ip_address="127.0.0.1"` alone is not enough: Ray replaces a loopback
    node address with the machine's routable one, and its gRPC servers, runtime
    env agent and metrics server then listen on outside interfaces. With the
    node address kept at 127.0.0.1 they bind loopback only (checked by the
    tests with the kernel's socket table)."""
    os.environ[_RAY_CLUSTER_SWITCH] = "0"  # for Ray's own child processes
    import ray  # optional: the [scale] extra
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False  # for this process, if ray was imported earlier
    # A small object store: only text and scalars travel.
    ray.init(address="local", include_dashboard=False, num_cpus=num_cpus, _node_ip_address="127.0.0.1",
             object_store_memory=100 * 1024 * 1024, log_to_driver=False)


_ACTOR_CLASS = None


def _actor_class():
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        import ray  # optional: the [scale] extra

        # No restarts: a restarted engine would come back at the checkpoint,
        # not at the current θ; the pool drops it instead.
        _ACTOR_CLASS = ray.remote(max_restarts=0, max_task_retries=0)(_EngineHost)
    return _ACTOR_CLASS


@dataclass
class EngineHandle:
    """One engine of the pool: its name (for logs and errors), Ray actor and pid."""

    name: str
    actor: Any
    pid: int
    host: str


class EnginePool:
    """Several engines behind one `Engine`-like object; see the module docstring."""

    def __init__(
        self,
        engines: int,
        model: str | Path | None = None,
        address: str | None = None,
        *,
        tensor_parallel_size: int = 1,
        **engine_kwargs: Any,
    ) -> None:
        if engines < 1:
            raise ValueError(f"engines must be >= 1, got {engines}")
        address = address or LOCAL
        DistributedSection(engines=engines, address=address)  # the [distributed] rules, for pools built in code
        try:
            import ray  # optional: the [scale] extra
        except ImportError:
            raise PoolError("several engines need Ray: pip install 'coevolve[scale]' (or pip install ray)") from None
        self._ray = ray
        self.model_path = models.resolve(model)
        self.tensor_parallel_size = tensor_parallel_size
        # Every engine runs the same noise mode; low-rank engines each batch
        # their share of the members in their own LoRA slots.
        self.noise = engine_kwargs.get("noise", "full")
        self.rank = engine_kwargs.get("rank", 1) if self.noise == "lowrank" else None
        self._owns_ray = False
        self.engines: list[EngineHandle] = []
        self._busy: dict[str, Any] = {}
        if not ray.is_initialized():
            if address == LOCAL:
                start_local_ray(num_cpus=engines)
            else:
                ray.init(address=address, log_to_driver=False)
            self._owns_ray = True
        try:
            self._start(engines, address, engine_kwargs)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ start-up
    def _start(self, engines: int, address: str, engine_kwargs: dict[str, Any]) -> None:
        ray = self._ray
        gpus = ray.cluster_resources().get("GPU", 0)
        kwargs = {**engine_kwargs, "tensor_parallel_size": self.tensor_parallel_size}
        base_env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} if self.tensor_parallel_size == 1 else {}
        if gpus:
            options = {"num_cpus": 1, "num_gpus": self.tensor_parallel_size}
            envs = [dict(base_env) for _ in range(engines)]
        else:
            if self.tensor_parallel_size != 1:
                raise PoolError("tensor_parallel_size > 1 needs GPUs; on CPU each engine is one process")
            options = {"num_cpus": 1}
            base_env["VLLM_CPU_KVCACHE_SPACE"] = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")
            # Pin each local engine to its own cores; on a joined cluster the
            # driver cannot see the workers' cores, so vLLM binds by itself.
            groups = core_groups(engines) if address == LOCAL else ["auto"] * engines
            envs = [{**base_env, "VLLM_CPU_OMP_THREADS_BIND": g} for g in groups]
        actor_class = _actor_class()
        actors = [
            actor_class.options(**options, runtime_env={"env_vars": env}).remote(str(self.model_path), env, kwargs)
            for env in envs
        ]
        infos = ray.get([a.describe.remote() for a in actors])
        self.engines = [
            EngineHandle(f"engine-{i}", actor, info["pid"], info["host"]) for i, (actor, info) in enumerate(zip(actors, infos))
        ]
        devices = {info["device"] for info in infos}
        counts = {info["num_parameters"] for info in infos}
        if len(devices) != 1 or len(counts) != 1:
            raise PoolError(f"engines disagree on device or model size: {infos}")
        dtypes = {info["dtype"] for info in infos}
        if len(dtypes) != 1:  # "auto" on hosts whose CPUs differ: their weights would differ
            raise PoolError(f"engines chose different weight types ({', '.join(sorted(dtypes))}): set [model] dtype "
                            "to one of them")
        self.device = devices.pop()
        self.dtype = dtypes.pop()
        self._num_parameters = counts.pop()
        self._noise_info = infos[0]["noise_info"]
        self._compare({h.name: info["checksum"] for h, info in zip(self.engines, infos)}, "at start-up")
        log.info("engine pool: %d engines on %s (%s)", len(self.engines), self.device,
                 ", ".join(f"{h.name} pid {h.pid}" for h in self.engines))

    # ------------------------------------------------------------ dispatch
    @property
    def busy(self) -> list[str]:
        """Names of engines with a call in flight (for monitoring)."""
        return list(self._busy)

    def _drop(self, handle: EngineHandle, exc: BaseException) -> None:
        if handle in self.engines:
            self.engines.remove(handle)
            log.warning("engine pool: %s (pid %d on %s) died and was dropped, %d engines left: %s",
                        handle.name, handle.pid, handle.host, len(self.engines), str(exc).splitlines()[0])

    def _is_death(self, exc: BaseException) -> bool:
        return isinstance(exc, self._ray.exceptions.RayActorError)

    def _own(self, exc: BaseException) -> BaseException:
        """A user's error raised in an engine (a prompt too long, a constraint refused) as the engine
        raised it: one line, without Ray's wrapper and the actor's traceback; other errors keep them."""
        cause = getattr(exc, "cause", None)
        return cause if isinstance(exc, self._ray.exceptions.RayTaskError) and isinstance(cause, UsageError) else exc

    def _spread(self, method: str, tasks: Sequence[tuple], offsets: Sequence[int] = ()) -> list[Any]:
        """Run `method(*args)` for each args tuple in `tasks`, one call in flight
        per engine, and return the results in task order. A task whose engine
        dies goes back to the queue; a task that raises stops the dispatch (after
        the calls in flight finish) and its error is raised. `offsets`: where each
        task's requests start in the whole call (a prompt too long is named by its place in it)."""
        ray = self._ray
        results: list[Any] = [None] * len(tasks)
        queue = deque(range(len(tasks)))
        idle = list(self.engines)
        inflight: dict[Any, tuple[EngineHandle, int]] = {}
        error: BaseException | None = None
        failed = 0  # the task whose error is raised
        try:
            while inflight or (queue and error is None):
                while queue and idle and error is None:
                    handle, index = idle.pop(0), queue.popleft()
                    inflight[handle.actor.call.remote(method, *tasks[index])] = (handle, index)
                    self._busy[handle.name] = index
                if not inflight:
                    break
                (ref,), _ = ray.wait(list(inflight), num_returns=1)
                handle, index = inflight.pop(ref)
                self._busy.pop(handle.name, None)
                try:
                    results[index] = ray.get(ref)
                    idle.append(handle)
                except Exception as exc:
                    if self._is_death(exc):
                        self._drop(handle, exc)
                        queue.appendleft(index)
                    else:
                        if error is None:
                            error, failed = self._own(exc), index
                        idle.append(handle)
        finally:
            self._busy.clear()
        if isinstance(error, ContextLengthError):  # the request's place in the whole call, not in its part
            raise error.shifted(offsets[failed] if offsets else 0) from None
        if error is not None:
            raise error
        if queue:
            raise NoEnginesLeft(f"all engines died; {len(queue)} of {len(tasks)} {method} calls never finished")
        return results

    def _broadcast(self, method: str, *args: Any) -> dict[str, Any]:
        """The same call on every engine; dead engines are dropped. Returns
        {engine name: result} for the engines that answered."""
        ray = self._ray
        calls = [(h, h.actor.call.remote(method, *args)) for h in list(self.engines)]
        answers: dict[str, Any] = {}
        error: BaseException | None = None
        for handle, ref in calls:
            try:
                answers[handle.name] = ray.get(ref)
            except Exception as exc:
                if self._is_death(exc):
                    self._drop(handle, exc)
                else:
                    error = error or exc
        if error is not None:
            raise self._own(error)
        if not self.engines:
            raise NoEnginesLeft(f"all engines died during {method}")
        return answers

    # ---------------------------------------------------------------- text
    def _shares(self, n: int) -> list[tuple[int, int]]:
        """[start, end) of `n` items in one contiguous share per engine (fewer when n is smaller)."""
        parts = max(1, min(len(self.engines), n))
        return [(i * n // parts, (i + 1) * n // parts) for i in range(parts)]

    def chat(
        self,
        conversations: Sequence[Sequence[Message]],
        sampling: Sampling,
        seeds: Sequence[int] | None = None,
        constraints: Sequence[str | None] | None = None,
    ) -> list[Completion]:
        """One batch split into one contiguous part per engine. Per-request
        seeds travel with their conversations, so sampled texts do not depend
        on which engine ran them; with kernels that are not batch-invariant
        (bf16 on CPU) they can depend on the split, i.e. the engine count."""
        check_requests(conversations, seeds, constraints)
        if not conversations:
            return []
        bounds = self._shares(len(conversations))
        tasks = [
            (list(conversations[a:b]), sampling, None if seeds is None else list(seeds[a:b]),
             None if constraints is None else list(constraints[a:b])) for a, b in bounds
        ]
        return [c for part in self._spread("chat", tasks, [a for a, _ in bounds]) for c in part]

    def generate_members(self, jobs: Sequence[MemberJob]) -> list[list[Completion]]:
        """Members spread over the engines; results in job order. Full mode:
        one member per engine at a time, the next to whichever engine frees
        first. Low-rank mode: one contiguous share of members per engine, each
        share one batch in that engine's LoRA slots."""
        if self.noise == "full":
            return [out[0] for out in self._spread("generate_members", [([job],) for job in jobs])]
        shares = self._spread("generate_members", [(list(jobs[a:b]),) for a, b in self._shares(len(jobs))])
        return [texts for share in shares for texts in share]

    def noise_info(self) -> dict:
        return dict(self._noise_info)

    @contextmanager
    def perturbed(self, seed: int, sigma: float) -> Iterator[None]:
        """Every engine perturbed by the same (seed, σ): a following `chat`
        splits its batch across them. `generate_members` is the faster way to
        run many members; this keeps single-engine callers working."""
        self._broadcast("perturb", int(seed), float(sigma))
        try:
            yield
        finally:
            self._broadcast("restore")

    # ------------------------------------------------------------- weights
    def apply_update(self, seeds: Sequence[int], coefficients: Sequence[float], alpha: float) -> None:
        """Every engine applies the same update from the scalars alone."""
        self._broadcast("apply_update", [int(s) for s in seeds], [float(c) for c in coefficients], float(alpha))

    def checksum(self) -> str:
        """The engines' common weight checksum; raises DivergenceError if they differ."""
        return self._compare(self._broadcast("checksum"), "after the last update")

    def _compare(self, checksums: dict[str, str], when: str) -> str:
        if len(set(checksums.values())) > 1:
            listing = ", ".join(f"{name}={value[:16]}" for name, value in checksums.items())
            raise DivergenceError(f"engine weights diverged {when}: {listing}")
        return next(iter(checksums.values()))

    def prompt_lengths(self, conversations: Sequence[Sequence[Message]]) -> list[int]:
        """Each conversation's prompt in tokens, as an engine sends it (they share one tokenizer): one
        engine measures them all (a search fits its prompts to the context with it)."""
        return self._spread("prompt_lengths", [([list(c) for c in conversations],)])[0]

    def reset(self) -> None:
        """Every engine back to the checkpoint's weights."""
        self._broadcast("reset")

    def num_parameters(self) -> int:
        return self._num_parameters

    def close(self) -> None:
        ray = self._ray
        for handle in self.engines:
            try:
                ray.kill(handle.actor)
            except Exception:  # already gone
                pass
        self.engines = []
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        self._owns_ray = False

    def __enter__(self) -> "EnginePool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
