"""An engine's start prints what a user can act on, not the warnings vLLM-CPU gives at every start about the
settings coevolve's Engine chose on purpose or the CPU platform (24 lines before the progress bar, 7 now:
the LD_PRELOAD hints, torch's NUMA line, the checkpoint's load bar). Each is dropped by its logger and the
start of its text, at WARNING only, after vLLM applied its logging config again as an engine's start does
(it reset the level coevolve once set on cpu_worker's logger, so the set_num_threads lines came back).

Real vLLM loggers and logging config, real vLLM kernel dispatcher, in a fresh interpreter; no engine."""

from __future__ import annotations

from conftest import run_python

# as vLLM 0.32 (vllm-cpu) words them: the engine's start before the filters (s56 measurement)
NOISE = [
    ("vllm.triton_utils.importing", "Triton is installed, but doesn't include CPU backend. Disabling Triton."),
    ("vllm.engine.arg_utils", "The global random seed is set to 0. Since VLLM_ENABLE_V1_MULTIPROCESSING is set to "
                              "False, this may affect the random state of the Python process that launched vLLM."),
    ("vllm.engine.arg_utils", "This model does not officially support disabling chunked prefill. Disabling this "
                              "manually may cause the engine to crash or produce incorrect outputs."),
    ("vllm.config.vllm", "Enforce eager set, disabling torch.compile, CUDAGraphs, and JIT kernel warmup."),
    ("vllm.config.vllm", "Inductor compilation was disabled by user settings, optimizations settings that are only "
                         "active during inductor compilation will be ignored."),
    ("vllm.platforms.cpu", "Triton is not installed. triton-cpu is expected on x86 CPUs."),
    ("vllm.platforms.cpu", "Reset SSM cache type to float32 for accelerated GDN mamba backend 'none'."),
    ("vllm.config.vllm", "Model Runner V2 requires Triton; using the V1 model runner instead."),
    ("vllm.v1.worker.cpu_worker", "CPU backend doesn't allow to use `torch.set_num_threads` after the thread "
                                  "binding, skip it."),
    # at a low-rank run's first member batch (s57 demo)
    ("vllm.v1.engine.input_processor", "vLLM has deprecated support for supporting different tokenizers for "
                                       "different LoRAs. By default, vLLM uses base model's tokenizer. If you "
                                       "are using a LoRA with its own tokenizer, consider specifying "
                                       "`--tokenizer [lora_path]` to use the LoRA tokenizer."),
]
KEPT = [
    ("warning", "vllm.v1.worker.cpu_worker", "libtcmalloc is not found in LD_PRELOAD. For best performance"),
    ("warning", "vllm.config.vllm", "max_model_len 4096 is greater than the model's 2048"),  # one not known
    ("error", "vllm.v1.worker.cpu_worker", "CPU backend doesn't allow to use `torch.set_num_threads` (as an error)"),
]

SCRIPT = f"""
import coevolve.engine.vllm_engine  # as Engine's module is imported before vLLM
import torch.distributed
from vllm.logger import _configure_vllm_root_logger, init_logger
from vllm.triton_utils.dispatcher import _rebind_kernels

_configure_vllm_root_logger()  # again, as an engine's start applies vLLM's logging config
for name, text in {NOISE!r}:
    init_logger(name).warning(text)
for level, name, text in {KEPT!r}:
    getattr(init_logger(name), level)(text)
_rebind_kernels([])  # the dispatcher's scan of every module, torch.distributed's deprecated alias among them
"""


def test_an_engine_start_drops_the_known_noise_and_keeps_the_rest():
    done = run_python(SCRIPT, timeout=300)
    assert done.returncode == 0, done.stderr
    said = done.stderr
    shown = [text for _, text in NOISE if text in said]
    assert shown == [], said
    for _, _, text in KEPT:
        assert said.count(text) == 1, said
    assert "reduce_op" not in said, said
