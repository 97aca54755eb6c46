"""`coevolve mirror RUN_DIR --to mlflow|tensorboard`: mirror a run (finished,
killed half-way or still going) to MLflow or TensorBoard afterwards, as
`[log] mlflow = true` / `tensorboard = true` would have during the run.
Again on the same run adds only what is new (RUN_DIR/mirror.json)."""

from __future__ import annotations

import argparse

from pydantic import ValidationError

from coevolve.base.errors import UsageError
from coevolve.base.logsection import LogSection
from coevolve.base.mirror import Mirror, check_log, require
from coevolve.dashboard.reader import kind_of, task_info, toml_file
from coevolve.runstore import RunStore


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("mirror", help="mirror a run's scalars and best program to MLflow or TensorBoard",
                              description=__doc__)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a heuristic or agent run directory")
    p.add_argument("--to", action="append", required=True, choices=["mlflow", "tensorboard"],
                   help="the tracker (repeat for both)")
    p.add_argument("--mlflow-uri", default=None,
                   help="an MLflow tracking URI (default: the run's [log] mlflow_uri, else RUN_DIR/mlflow/mlflow.db)")
    p.add_argument("--experiment", default=None, help="MLflow experiment (default: the run's [log], else coevolve)")
    p.add_argument("--tensorboard-dir", default=None,
                   help="write event files to DIR/<run name> (default: the run's [log], else RUN_DIR/tensorboard)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    run_dir = RunStore.open_run(args.run_dir).dir  # run --resume's refusals: nothing is written elsewhere
    if kind_of(run_dir) not in ("run", "agent"):  # e.g. a comparison's folder, which holds a config.toml too
        raise UsageError(f"{run_dir} is not a run directory: give one of its runs")
    require(sorted(set(args.to)), asked="--to {name}")
    logged = toml_file(run_dir / "config.toml").get("log", {})
    flags = {"mlflow_uri": args.mlflow_uri, "experiment": args.experiment, "tensorboard_dir": args.tensorboard_dir}
    try:
        log = LogSection.model_validate({**(logged if isinstance(logged, dict) else {}),
                                         **{k: v for k, v in flags.items() if v is not None},
                                         "mlflow": "mlflow" in args.to, "tensorboard": "tensorboard" in args.to})
    except ValidationError as exc:
        raise UsageError(f"{run_dir / 'config.toml'}: [log] {exc.errors()[0]['msg']}") from None
    check_log(log)  # where it sends them, as a run checks it: else only a warning, and exit 1
    task = str(toml_file(run_dir / "config.toml").get("run", {}).get("task", ""))
    direction = task_info(task)[0] if task else "min"  # of "best so far"
    mirror = Mirror(run_dir, log, direction, live=False)
    points = mirror.update()
    mirror.close()
    for line in mirror.where():
        print(f"mirrored {run_dir} ({points} new points) to {line}")
    return 0 if len(mirror.sinks) == len(log.trackers) else 1
