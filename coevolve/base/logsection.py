"""`[log]`: where a run is mirrored besides its own directory.

    [log]
    mlflow = true          # scalars + best program to an MLflow store (extra: coevolve[mlflow])
    tensorboard = true     # the same scalars + program text as TensorBoard event files (coevolve[tensorboard])
    mlflow_uri = ""        # "" = a SQLite store in RUN_DIR/mlflow/; or any MLflow tracking URI
    experiment = "coevolve"
    tensorboard_dir = ""   # "" = RUN_DIR/tensorboard
    prompts = true         # heuristic runs: each request's messages in RUN_DIR/prompts.jsonl

The mirror itself is coevolve/base/mirror.py (it reads the run
directory's own records, so the loop does not know about trackers). A pydantic
model, strict (a string for a flag is an error) and closed (an unknown key is
an error), like every config section; the config loader turns its errors into
the usual one-line `config error: log.<key> ...`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class LogSection(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    mlflow: bool = False
    tensorboard: bool = False
    mlflow_uri: str = ""  # "" = sqlite store under RUN_DIR/mlflow (no server)
    experiment: str = "coevolve"
    tensorboard_dir: str = ""  # "" = RUN_DIR/tensorboard
    # heuristic runs: what each request was sent, in RUN_DIR/prompts.jsonl (the dashboard shows it under the
    # candidate); each distinct prompt is written once, the rest name it by its sha256
    prompts: bool = True

    @property
    def trackers(self) -> list[str]:
        """The trackers switched on, in a fixed order."""
        return [name for name in ("mlflow", "tensorboard") if getattr(self, name)]
