"""`coevolve distill` input checks (the teacher-backed paths run in the
engine and server tests)."""

from coevolve.cli import main


def test_usage_errors_name_the_bad_input(tmp_path, capsys):
    assert main(["distill", str(tmp_path / "missing"), "--out", str(tmp_path / "s")]) == 2
    assert "no such run directory" in capsys.readouterr().err
    assert main(["distill", str(tmp_path), "--out", str(tmp_path / "s")]) == 2
    assert "neither trajectories/ (an agent run) nor candidates.jsonl (a heuristic run)" in capsys.readouterr().err
    (tmp_path / "trajectories").mkdir()
    (tmp_path / "trajectories" / "eval_000.jsonl").write_text("")
    assert main(["distill", str(tmp_path), "--out", str(tmp_path / "s")]) == 2
    assert "no trajectory .jsonl files" in capsys.readouterr().err  # eval files need --include-eval
    (tmp_path / "trajectories" / "round_000.jsonl").write_text('{"task": "sudoku"}\n')
    assert main(["distill", str(tmp_path), "--out", str(tmp_path / "s")]) == 2
    assert "round_000.jsonl:1: not a trajectory record" in capsys.readouterr().err
    assert main(["distill", str(tmp_path), "--out", str(tmp_path / "s"), "--teacher-base-url", "http://x/v1"]) == 2
    assert "--endpoint-model is required with --endpoint-base-url" in capsys.readouterr().err  # old flag name still read
    assert not (tmp_path / "s").exists()
