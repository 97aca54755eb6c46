"""The only code that touches model weights. vLLM mixes this class into each of
its workers (`worker_extension_cls`); the engine reaches it with
`collective_rpc`. Every method works on the worker's own shard, so the same
calls serve one CPU engine, one GPU, or a tensor-parallel group.

Weights: θ lives as an fp32 master copy in host RAM. The live (bf16) weights are
always either cast(θ) or cast(θ + σε) for one perturbation. Restore re-casts
the master, so it is bit-exact no matter how many perturbations came before;
updates accumulate in fp32 on the master, so tiny α·z steps are not rounded
away. The device holds only one noise chunk of scratch at a time.
"""

from __future__ import annotations

import hashlib

import torch

from coevolve.base import noise


def _keep_weights_dispatch(layer: torch.nn.Module, remove_weight: bool) -> None:
    """Stand-in for vLLM's CPU GEMM dispatch. The stock one packs each linear
    weight into a oneDNN handle and empties `layer.weight`, so ES would only see
    embeddings and norms (28M of SmolLM2's 134.5M parameters), and a packed copy
    would not follow in-place weight changes. Plain F.linear reads the live
    weight on every call."""
    if layer.weight.ndim != 2:
        return _stock_dispatch(layer, remove_weight)
    layer.cpu_linear = torch.nn.functional.linear


def _patch_cpu_dispatch() -> None:
    global _stock_dispatch
    try:
        from vllm.model_executor.layers import utils as layer_utils
    except ImportError:  # pragma: no cover - vLLM layout changed
        return
    if getattr(layer_utils.dispatch_cpu_unquantized_gemm, "_coevolve", False):
        return
    _stock_dispatch = layer_utils.dispatch_cpu_unquantized_gemm
    _keep_weights_dispatch._coevolve = True  # type: ignore[attr-defined]
    layer_utils.dispatch_cpu_unquantized_gemm = _keep_weights_dispatch


_stock_dispatch = None
# vLLM imports the extension module while building the worker class, before
# weights load, which is exactly when the patch must be in place.
_patch_cpu_dispatch()


class WeightsExtension:
    """Methods prefixed `es_` are called through `collective_rpc`."""

    def _model(self) -> torch.nn.Module:
        return self.model_runner.model  # type: ignore[attr-defined]

    def _params(self) -> list[tuple[str, torch.nn.Parameter]]:
        return list(self._model().named_parameters())

    def _stream(self, name: str, p: torch.nn.Parameter) -> str:
        """Noise stream name of a parameter. Under tensor parallelism a sharded
        parameter (vLLM marks them with input_dim/output_dim) draws its own
        stream per rank; replicated ones (norms) share one stream so their
        copies stay identical. A history is therefore tied to its TP size."""
        rank, size = self._tp_layout
        if size > 1 and (hasattr(p, "output_dim") or hasattr(p, "input_dim")):
            return f"{name}@tp{rank}/{size}"
        return name

    def es_init(self) -> int:
        """Snapshot θ into host fp32. Returns the parameter element count."""
        try:
            from vllm.distributed import get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size

            self._tp_layout = (get_tensor_model_parallel_rank(), get_tensor_model_parallel_world_size())
        except Exception:  # not inside a vLLM worker (e.g. the CUDA check script)
            self._tp_layout = (0, 1)
        self._master = {}
        for name, p in self._params():
            master = p.detach().to("cpu", torch.float32).contiguous()
            # Pinned host memory makes the per-chunk host-to-GPU copies async
            # and several times faster than pageable memory.
            self._master[name] = master.pin_memory() if p.is_cuda else master
        for name, p in self._params():
            if p.numel() == 0:
                raise RuntimeError(
                    f"parameter {name} is empty: its weight was packed away, ES would miss it"
                )
        self._perturbed = False
        return self.es_num_parameters()

    def es_reset(self, model_dir: str) -> None:
        """Reload the checkpoint's weights in place (vLLM's own loader handles
        fused tensors) and make them the new θ."""
        from pathlib import Path

        from safetensors.torch import safe_open

        def weights():
            for file in sorted(Path(model_dir).glob("*.safetensors")):
                with safe_open(str(file), framework="pt") as handle:
                    for key in handle.keys():
                        yield key, handle.get_tensor(key)

        with torch.no_grad():
            self._model().load_weights(weights())
        self.es_init()

    def es_num_parameters(self) -> int:
        return sum(p.numel() for _, p in self._params())

    def es_parameter_names(self) -> list[tuple[str, list[int]]]:
        return [(name, list(p.shape)) for name, p in self._params()]

    def _write(self, p: torch.nn.Parameter, start: int, end: int, values: torch.Tensor) -> None:
        p.data.view(-1)[start:end].copy_(values)

    def es_perturb(self, seed: int, sigma: float) -> int:
        """Live weights := cast(θ + σ·ε(seed)). Returns elements perturbed."""
        touched = 0
        with torch.no_grad():
            for name, p in self._params():
                master = self._master[name].view(-1)
                gen = noise.generator(seed, self._stream(name, p), p.device)
                for start, end in noise.chunks(p.numel()):
                    eps = noise.draw(gen, end - start, p.device)
                    eps.mul_(sigma).add_(master[start:end].to(p.device, non_blocking=True))
                    self._write(p, start, end, eps)
                    touched += end - start
        self._perturbed = True
        return touched

    def es_restore(self) -> None:
        """Live weights := cast(θ), bit-exactly."""
        with torch.no_grad():
            for name, p in self._params():
                master = self._master[name].view(-1)
                for start, end in noise.chunks(p.numel()):
                    self._write(p, start, end, master[start:end].to(p.device, non_blocking=True))
        self._perturbed = False

    def es_update(self, seeds: list[int], coefficients: list[float], alpha: float) -> None:
        """θ += α/G Σ c_i ε(seed_i), accumulated in fp32, then live := cast(θ)."""
        scale = alpha / len(seeds)
        with torch.no_grad():
            for name, p in self._params():
                master = self._master[name].view(-1)
                gens = [noise.generator(s, self._stream(name, p), p.device) for s in seeds]
                for start, end in noise.chunks(p.numel()):
                    acc = torch.zeros(end - start, dtype=torch.float32, device=p.device)
                    for gen, c in zip(gens, coefficients):
                        acc.add_(noise.draw(gen, end - start, p.device), alpha=float(c))
                    master[start:end].add_(acc.to("cpu"), alpha=scale)
                    self._write(p, start, end, master[start:end].to(p.device, non_blocking=True))
        self._perturbed = False

    def es_checksum(self) -> str:
        """sha256 over the live weights' bytes, in parameter order."""
        digest = hashlib.sha256()
        for name, p in self._params():
            digest.update(name.encode())
            raw = p.detach().to("cpu").contiguous().view(-1)
            digest.update(raw.view(torch.uint8).numpy().tobytes())
        return digest.hexdigest()

    def es_state_dict(self) -> dict[str, torch.Tensor]:
        """Live weights on the host, for export."""
        return {name: p.detach().to("cpu").clone() for name, p in self._params()}

    def es_packed_modules(self) -> dict[str, list[str]]:
        return dict(getattr(self._model(), "packed_modules_mapping", {}) or {})
