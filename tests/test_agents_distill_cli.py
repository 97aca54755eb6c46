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


def test_out_is_checked_before_any_model_loads(tmp_path, capsys, monkeypatch):
    """A skill folder name the SKILL.md could not carry, or a SKILL.md already in --out (a hand-written skill
    the distillation would replace unasked), is refused before the teacher starts (it once loaded the engine,
    distilled, then refused the name; or replaced the hand-written skill)."""
    from coevolve.commands import distill as command

    monkeypatch.setattr(command, "teacher", lambda args: (_ for _ in ()).throw(AssertionError("a teacher started")))
    (tmp_path / "trajectories").mkdir()
    assert main(["distill", str(tmp_path), "--out", str(tmp_path / "My_Skill")]) == 2
    assert "--out " in (err := capsys.readouterr().err) and "name 'My_Skill' must be lowercase letters" in err
    hints = tmp_path / "hints"
    hints.mkdir()
    (hints / "SKILL.md").write_text("---\nname: hints\ndescription: mine\n---\n## Moves\n- Guess the middle.\n")
    assert main(["distill", str(tmp_path), "--out", str(hints)]) == 2
    err = capsys.readouterr().err
    assert "already holds a SKILL.md" in err and "--previous" in err and "--overwrite" in err
    assert "Guess the middle" in (hints / "SKILL.md").read_text()
    # patching it in place, or asking to replace it, goes on (to the trajectories check here)
    for extra in (["--previous", str(hints)], ["--overwrite"]):
        assert main(["distill", str(tmp_path), "--out", str(hints), *extra]) == 2
        assert "no trajectory .jsonl files" in capsys.readouterr().err


def test_an_endpoint_url_without_its_scheme_is_refused_by_its_flag(monkeypatch):
    """distill's endpoint goes through the [endpoint] section's checks, named by distill's flags: a URL
    without http:// was probed as given and refused as "the environment variable is not set" (no loopback
    exemption) or "cannot reach", never the scheme."""
    import argparse

    import pytest

    from coevolve.base.errors import UsageError
    from coevolve.commands import distill as command

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    args = argparse.Namespace(endpoint_base_url="127.0.0.1:8000/v1", endpoint_model="m", api_key_env="OPENAI_API_KEY",
                              model=None)
    with pytest.raises(UsageError) as refused:
        command.teacher(args)
    assert str(refused.value) == ("--endpoint-base-url must be an http:// or https:// URL, such as "
                                  "http://127.0.0.1:8000/v1 (got '127.0.0.1:8000/v1')")
    args.endpoint_base_url, args.api_key_env = "http://api.example.invalid/v1", "NO_SUCH_KEY_VAR"
    with pytest.raises(UsageError, match=r"^--api-key-env: the environment variable NO_SUCH_KEY_VAR is not set"):
        command.teacher(args)
