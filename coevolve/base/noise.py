"""The one noise generator. A perturbation is never stored: its noise is a pure
function of (seed, parameter name, element index) and is regenerated on demand,
one bounded chunk at a time.

Each parameter gets its own stream, seeded from a hash of (seed, name), so
tensors are independent of each other and of the order they are visited in.
The same stream serves both noise modes: "full" (ε for every element, drawn in
CHUNK-sized pieces) and "lowrank" (the factors A, then B, of a 2-D weight); a
history records which mode wrote it.
Streams are drawn with torch's generator on the parameter's device: CPU and CUDA
generators differ, so a history replays bit-for-bit only on the same device
kind (the history records it).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:  # torch comes with the engine extra; seeds and versions need none of it
    import torch  # optional: torch comes with the engine extra

# Elements per draw: bounds the scratch memory ES adds (16 MiB of fp32) and is
# part of the noise definition, so it must never change silently.
CHUNK = 1 << 22
NOISE_VERSION = 1


def stream_seed(seed: int, name: str) -> int:
    digest = hashlib.sha256(f"coevolve-noise-v{NOISE_VERSION}:{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def chunks(numel: int) -> Iterator[tuple[int, int]]:
    for start in range(0, numel, CHUNK):
        yield start, min(start + CHUNK, numel)


def generator(seed: int, name: str, device: torch.device) -> torch.Generator:
    import torch  # optional: torch comes with the engine extra

    gen = torch.Generator(device=device)
    gen.manual_seed(stream_seed(seed, name))
    return gen


def draw(gen: torch.Generator, n: int, device: torch.device) -> torch.Tensor:
    """The next n standard-normal fp32 values of a parameter's stream."""
    import torch  # optional: torch comes with the engine extra

    return torch.randn(n, generator=gen, device=device, dtype=torch.float32)


def lowrank_factors(
    seed: int, name: str, rows: int, cols: int, rank: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Low-rank noise of an (rows x cols) matrix: A (rows x rank), then
    B (cols x rank), the first values of the parameter's own stream. The
    member's perturbation is A @ B.T / sqrt(rank) (scaled by sigma)."""
    gen = generator(seed, name, device)
    a = draw(gen, rows * rank, device).view(rows, rank)
    b = draw(gen, cols * rank, device).view(cols, rank)
    return a, b


def member_seed(run_seed: int, generation: int, index: int) -> int:
    """Seeds for ES population members: distinct per (run, generation, member)."""
    digest = hashlib.sha256(f"coevolve-member:{run_seed}:{generation}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF
