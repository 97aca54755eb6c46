"""Export live engine weights back into the source checkpoint's layout.

vLLM fuses some checkpoint tensors (q/k/v into qkv_proj, gate/up into
gate_up_proj); the model class lists these in `packed_modules_mapping`. We
split fused tensors back using the source checkpoint's own shapes, so no
per-architecture table is needed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from coevolve.base.durable import atomic_path


def _source_shapes(model_dir: Path) -> dict[str, list[int]]:
    from safetensors import safe_open  # heavy, on the export path only

    shapes = {}
    for file in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():
                shapes[key] = list(handle.get_slice(key).get_shape())
    return shapes


def export_checkpoint(
    source: Path,
    out_dir: Path,
    live: dict[str, torch.Tensor],
    packed: dict[str, list[str]],
) -> Path:
    from safetensors.torch import save_file  # heavy, on the export path only

    shapes = _source_shapes(source)
    tensors: dict[str, torch.Tensor] = {}
    for key, shape in shapes.items():
        if key in live:
            tensors[key] = live[key]
            continue
        tensors[key] = _unpack(key, shapes, live, packed)
        if list(tensors[key].shape) != shape:
            raise RuntimeError(f"export: {key} has shape {list(tensors[key].shape)}, source {shape}")
    out_dir.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.is_file() and item.suffix != ".safetensors" and item.name != "model.safetensors.index.json":
            with atomic_path(out_dir / item.name) as tmp:  # a copy is never seen half written either
                shutil.copy2(item, tmp)
    with atomic_path(out_dir / "model.safetensors") as tmp:  # never half a weights file
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp))
    return out_dir


def _unpack(key: str, shapes: dict, live: dict, packed: dict[str, list[str]]) -> torch.Tensor:
    for fused, parts in packed.items():
        for part in parts:
            token = f".{part}."
            if token not in key:
                continue
            fused_key = key.replace(token, f".{fused}.")
            if fused_key not in live:
                continue
            offset = 0
            for other in parts:
                other_key = key.replace(token, f".{other}.")
                rows = shapes[other_key][0]
                if other == part:
                    return live[fused_key][offset : offset + rows]
                offset += rows
    raise RuntimeError(f"export: no engine tensor for checkpoint key {key}")
