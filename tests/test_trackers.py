"""`[log] mlflow / tensorboard` and `coevolve mirror`: a run directory mirrored
to an MLflow store and TensorBoard event files, read back with the tools' own
readers (MlflowClient's metric history, TensorBoard's EventAccumulator).

Unit tests on run directories written here; the real runs (a heuristic
`coevolve run` and an agent run on the session engine, with [log] on) are
mirrored in tests/test_dashboard_browser.py, which already pays for them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from coevolve.cli import main

ROOT = Path(__file__).resolve().parents[1]
CONFIG = '[run]\nmethod = "eoh+esopt"\ntask = "tsp_construct"\nbudget = 6\nseed = 0\n'


def candidate(cid: int, objective: float | None, parents: list[int] | None = None) -> dict:
    return {"id": cid, "step": cid // 3, "operator": "i1", "parents": parents or [], "objective": objective,
            "code": f"def select_next_node(*a):\n    return {cid}\n", "idea": f"idea {cid}",
            "failure": None if objective is not None else "exception", "message": "", "duplicate_of": None}


def write_lines(path: Path, records: list[dict], mode: str = "w") -> None:
    with open(path, mode) as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in records))


def heuristic_run(path: Path) -> Path:
    """A run killed after two steps: 4 candidates, 1 ES generation, a torn last line."""
    path.mkdir()
    (path / "config.toml").write_text(CONFIG)
    write_lines(path / "events.jsonl", [{"type": "start", "version": 1, "config": {}}, {"type": "step", "step": 0}])
    write_lines(path / "candidates.jsonl", [candidate(1, 9.0), candidate(2, None), candidate(3, 7.5, [1]),
                                           candidate(4, 8.0, [1])])
    with open(path / "candidates.jsonl", "a") as handle:
        handle.write('{"id": 5, "obj')  # a write in progress
    write_lines(path / "history.jsonl", [{"generation": 0, "rewards": [1.0, 0.0], "normalised": [1.0, -1.0],
                                          "sigma": 1e-3, "alpha": 5e-4, "checksum": "abc", "time": 1.0e9}])
    return path


def finish(path: Path) -> None:
    """The rest of the run: the torn line completed, two more candidates, a second generation, the end."""
    text = (path / "candidates.jsonl").read_text()
    (path / "candidates.jsonl").write_text(text[: text.rfind("\n") + 1])
    write_lines(path / "candidates.jsonl", [candidate(5, 6.0, [3]), candidate(6, None)], "a")
    write_lines(path / "history.jsonl", [{"generation": 1, "rewards": [0.5, 0.5], "normalised": [0.0, 0.0],
                                          "sigma": 1e-3, "alpha": 5e-4, "checksum": "def", "time": 1.0e9 + 5}], "a")
    write_lines(path / "events.jsonl", [{"type": "end", "evaluations": 6}], "a")
    (path / "best.py").write_text("# best\n" + candidate(5, 6.0)["code"])
    (path / "summary.json").write_text(json.dumps({"train": {"direction": "min"}, "best": {"id": 5}}))


def mlflow_history(run_dir: Path) -> tuple[object, dict[str, list[tuple[int, float]]]]:
    from mlflow.tracking import MlflowClient

    state = json.loads((run_dir / "mirror.json").read_text())["mlflow"]
    client = MlflowClient(tracking_uri=state["target"])
    run = client.get_run(state["run_id"])
    history = {key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
               for key in run.data.metrics}
    return client, run, history


def tensorboard_scalars(folder: Path) -> tuple[object, dict[str, list[tuple[int, float]]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc, {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_the_mirrors_valid_rate_is_over_the_evaluations_charged(tmp_path):
    """A +trace2skill run's analysts are charged between candidates (ids 1, 2, then 6 after three analyst
    requests): the valid rate at 6 is 2 valid of 6 evaluations, as the dashboard and summary count it."""
    from coevolve.base.logsection import LogSection
    from coevolve.base.mirror import Mirror

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.toml").write_text(CONFIG)
    write_lines(run_dir / "events.jsonl", [{"type": "start", "version": 1, "config": {}}])
    write_lines(run_dir / "candidates.jsonl", [candidate(1, 9.0), candidate(2, None), candidate(6, 7.0)])
    mirror = Mirror(run_dir, LogSection(mlflow=True), "min")
    mirror.update()
    mirror.close()
    assert mlflow_history(run_dir)[2]["valid_rate"] == [(1, 1.0), (2, 0.5), (6, 2 / 6)]


def test_mirror_follows_a_run_and_adds_each_point_once(tmp_path):
    from coevolve.base.logsection import LogSection
    from coevolve.base.mirror import Mirror

    run_dir = heuristic_run(tmp_path / "run")
    log = LogSection(mlflow=True, tensorboard=True)
    mirror = Mirror(run_dir, log, "min")
    assert mirror.update() > 0
    client, run, history = mlflow_history(run_dir)
    assert history["best_so_far"] == [(1, 9.0), (2, 9.0), (3, 7.5), (4, 7.5)]
    assert history["valid_rate"] == [(1, 1.0), (2, 0.5), (3, 2 / 3), (4, 0.75)]
    assert history["es/member_00/reward"] == [(0, 1.0)] and history["es/sigma"] == [(0, 1e-3)]
    assert run.data.params["run.task"] == "tsp_construct" and run.info.status == "RUNNING"
    # what the candidate wrote is the artefact: the best so far (candidate 3)
    assert "return 3" in Path(client.download_artifacts(run.info.run_id, "best_program.py", str(tmp_path))).read_text()
    assert mirror.update() == 0  # nothing new: nothing written
    mirror.close()  # the process ends here (killed run: not finished)
    assert mlflow_history(run_dir)[1].info.status == "KILLED"

    finish(run_dir)  # the run goes on in a later session; a new mirror (new process) resumes from mirror.json
    mirror = Mirror(run_dir, log, "min")
    mirror.close()
    client, run, history = mlflow_history(run_dir)
    assert history["best_so_far"] == [(1, 9.0), (2, 9.0), (3, 7.5), (4, 7.5), (5, 6.0), (6, 6.0)]
    assert [step for step, _ in history["valid_rate"]] == [1, 2, 3, 4, 5, 6]
    assert history["es/all_equal"] == [(0, 0.0), (1, 1.0)]
    assert run.info.status == "FINISHED"
    artefacts = {f.path for f in client.list_artifacts(run.info.run_id)}
    assert {"best.py", "summary.json", "config.toml", "best_program.py"} <= artefacts

    acc, scalars = tensorboard_scalars(run_dir / "tensorboard")
    assert scalars["best_so_far"] == history["best_so_far"]
    assert scalars["es/reward_mean"] == [(0, 0.5), (1, 0.5)]
    from tensorboard.util import tensor_util

    best = [tensor_util.make_ndarray(e.tensor_proto).item().decode() for e in acc.Tensors("best_program.py")]
    assert len(best) == 3 and "return 5" in best[-1]  # 1, then 3, then 5 improved the best


def test_a_run_given_more_budget_is_running_again_and_uploads_its_files_when_it_ends_again(tmp_path):
    """`coevolve run --resume DIR --budget N` after the end: MLflow sees the run running until its next
    end, then finished with the new best.py."""
    from coevolve.base.logsection import LogSection
    from coevolve.base.mirror import Mirror, run_finished

    run_dir = heuristic_run(tmp_path / "run")
    finish(run_dir)
    log = LogSection(mlflow=True)
    Mirror(run_dir, log, "min").close()
    assert run_finished(run_dir) == 1 and mlflow_history(run_dir)[1].info.status == "FINISHED"
    write_lines(run_dir / "events.jsonl", [{"type": "extend", "budget": 8, "from": 6}], "a")
    assert run_finished(run_dir) == 0
    Mirror(run_dir, log, "min").close()  # killed during the extension
    assert mlflow_history(run_dir)[1].info.status == "KILLED"
    write_lines(run_dir / "candidates.jsonl", [candidate(7, 5.0, [5]), candidate(8, None)], "a")
    write_lines(run_dir / "events.jsonl", [{"type": "end", "evaluations": 8}], "a")
    (run_dir / "best.py").write_text("# best\n" + candidate(7, 5.0)["code"])
    Mirror(run_dir, log, "min").close()
    client, run, history = mlflow_history(run_dir)
    assert run.info.status == "FINISHED" and run_finished(run_dir) == 2
    assert history["best_so_far"][-2:] == [(7, 5.0), (8, 5.0)]
    assert "return 7" in Path(client.download_artifacts(run.info.run_id, "best.py", str(tmp_path / "dl"))).read_text()


def test_mirror_command_on_a_finished_run_and_bad_input(tmp_path, capsys):
    run_dir = heuristic_run(tmp_path / "run")
    finish(run_dir)
    board = tmp_path / "boards"
    assert main(["mirror", str(run_dir), "--to", "tensorboard", "--tensorboard-dir", str(board)]) == 0
    assert "mirrored" in capsys.readouterr().out
    _, scalars = tensorboard_scalars(board / "run")
    assert [s for s, _ in scalars["valid_rate"]] == [1, 2, 3, 4, 5, 6]
    assert main(["mirror", str(run_dir), "--to", "tensorboard", "--tensorboard-dir", str(board)]) == 0
    _, again = tensorboard_scalars(board / "run")
    assert again == scalars  # nothing twice

    assert main(["mirror", str(tmp_path), "--to", "mlflow"]) == 2
    assert "not a run directory" in capsys.readouterr().err
    # a damaged run file: the command's one error line, naming it (no "the run goes on": none is running)
    damaged = heuristic_run(tmp_path / "damaged")
    with open(damaged / "events.jsonl", "a") as events:
        events.write("nonsense\n")
    assert main(["mirror", str(damaged), "--to", "tensorboard", "--tensorboard-dir", str(board)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"coevolve mirror: error: {damaged / 'events.jsonl'}: line "), err
    assert err.endswith("is not valid JSON (Expecting value)"), err
    # a folder the tracker cannot make: refused before anything is mirrored (it was a warning, and exit 1)
    assert main(["mirror", str(run_dir), "--to", "tensorboard", "--tensorboard-dir", "/proc/x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "log.tensorboard_dir cannot hold the event files" in err, err


def test_a_tracker_without_its_extra_is_refused_before_anything_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if coevolve[mlflow] were not installed
    config = tmp_path / "config.toml"
    config.write_text(CONFIG + "[log]\nmlflow = true\n")
    assert main(["run", str(config), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "[log] mlflow = true needs MLflow, which is not installed: pip install 'coevolve[mlflow]'" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
    run_dir = heuristic_run(tmp_path / "run")
    assert main(["mirror", str(run_dir), "--to", "mlflow"]) == 2
    assert "pip install 'coevolve[mlflow]'" in capsys.readouterr().err and not (run_dir / "mirror.json").exists()


def test_log_section_errors_name_the_field(tmp_path, capsys):
    config = tmp_path / "config.toml"
    for body, message in (("mlflow = 1", "log.mlflow must be true or false (got 1)"),
                          ("wandb = true", "log.wandb is not a known field (known: experiment, mlflow")):
        config.write_text(CONFIG + "[log]\n" + body + "\n")
        assert main(["run", str(config), "--out", str(tmp_path / "out")]) == 2
        assert f"config error: {message}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_failing_tracker_warns_once_and_the_run_goes_on(tmp_path):
    from coevolve.base.logsection import LogSection
    from coevolve.base.mirror import Mirror

    run_dir = heuristic_run(tmp_path / "run")
    lines: list[str] = []
    mirror = Mirror(run_dir, LogSection(tensorboard=True), "min", warn=lines.append)

    def broken(points, texts):
        raise OSError("disk full")
    mirror.sinks[0].write = broken
    mirror.update()
    mirror.update()
    assert len(lines) == 1 and lines[0].startswith("warning: mirroring to tensorboard stopped (OSError: disk full)")
    assert f"coevolve mirror {run_dir} --to tensorboard" in lines[0]


def test_a_tracker_that_cannot_open_or_damaged_state_never_stops_the_run(tmp_path, capsys):
    from coevolve.base.logsection import LogSection
    from coevolve.base.mirror import Mirror

    run_dir = heuristic_run(tmp_path / "run")
    lines: list[str] = []
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the event folder should go
    mirror = Mirror(run_dir, LogSection(tensorboard=True, tensorboard_dir=str(blocked)), "min", warn=lines.append)
    assert mirror.sinks == [] and mirror.update() == 0 and lines[0].startswith("warning: not mirroring to tensorboard")
    (run_dir / "mirror.json").write_text("{torn")
    mirror = Mirror(run_dir, LogSection(tensorboard=True), "min", warn=lines.append)
    assert mirror.sinks == [] and lines[-1].startswith("warning: not mirroring") and "mirror.json is unreadable" in lines[-1]
    mirror.close()
    assert (run_dir / "mirror.json").read_text() == "{torn" and not (run_dir / "tensorboard").exists()
    assert main(["mirror", str(run_dir), "--to", "tensorboard"]) == 1
    assert "remove it to mirror the run afresh" in capsys.readouterr().err
