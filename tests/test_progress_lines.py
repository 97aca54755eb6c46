"""A run's progress bar into a stream that is no terminal (a log file under nohup, a job's log, CI): each
redraw a line of its own, no carriage returns, the last state once. Before, tqdm's carriage returns made a
whole run one line of the log (s55 newcomer walkthrough, benchmarks/results/s55/walkthrough_newcomer.md)."""

from __future__ import annotations

from coevolve.search.progress import ProgressBar


def test_a_bar_into_a_log_writes_a_line_per_step(capsys):
    bar = ProgressBar(10, "sample demo")
    for used in (3, 6, 10):
        bar.update(used, {"best": str(used)})
    bar.close()
    err = capsys.readouterr().err
    assert "\r" not in err, repr(err)
    lines = err.splitlines()
    assert [line.split("|")[0] for line in lines] == ["sample demo:   0%", "sample demo:  30%", "sample demo:  60%",
                                                      "sample demo: 100%"], lines
    assert lines[-1].endswith("best=10]") and "10/10" in lines[-1]
