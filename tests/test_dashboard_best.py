"""The dashboard names the run's best as summary.json does: where no proposal beat the seeded template, the
template itself (id 0), not a later candidate that scored the same, and not "none" where every proposal
was a rejected clone of it.

Why: s55 walkthrough: a run whose every reply was the template showed best #1 (a copy of the template's
code) on its page while its summary, best.py and run table named candidate 0; with fingerprints on, the
page showed no best at all. Real CLI run against the stub endpoint (it answers with tsp_construct's
template), the real sandbox and dashboard reader; no vLLM."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import endpoint_stub
import pytest

from coevolve.cli import main
from coevolve.dashboard import reader
from test_dashboard import client
from test_dashboard_browser import browser, js, start_dashboard, wait  # noqa: F401 (browser: a fixture)

stub, no_key = endpoint_stub.stub, endpoint_stub.no_key  # its fixtures, where pytest finds them


def template_run(tmp_path: Path, base_url: str, fingerprint: bool) -> Path:
    """A finished run whose every proposal is the template's code, the template seeded as candidate 0."""
    config = tmp_path / "run.toml"
    config.write_text(f'[run]\nmethod = "sample"\ntask = "tsp_construct"\nbudget = 4\nseed = 0\n'
                      f'[sample]\nbatch = 2\n[sandbox]\ntimeout_s = 10\n'
                      f'[context]\nconstrain = false\nseed_template = true\nfingerprint = {str(fingerprint).lower()}\n'
                      f'[endpoint]\nbase_url = "{base_url}"\nmodel = "{endpoint_stub.MODEL}"\nretries = 1\n'
                      f'concurrency = 1\n')
    out = tmp_path / "run"
    assert main(["run", str(config), "--out", str(out), "--no-progress"]) == 0
    return out


def running_copy(run: Path, to: Path) -> Path:
    """The run as it was before it ended: no summary, no end event."""
    shutil.copytree(run, to)
    (to / "summary.json").unlink()
    events = [line for line in (to / "events.jsonl").read_text().splitlines() if json.loads(line)["type"] != "end"]
    (to / "events.jsonl").write_text("".join(line + "\n" for line in events))
    return to


@pytest.mark.parametrize("fingerprint", [False, True], ids=["repeats-scored", "clones-rejected"])
def test_the_best_is_the_template_as_the_summary_says_while_running_and_once_ended(stub, tmp_path, fingerprint):
    run = template_run(tmp_path, stub.base_url, fingerprint)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best"]["id"] == 0  # what the run itself says: nothing beat the template
    valid = [json.loads(line)["objective"] is not None for line in (run / "candidates.jsonl").read_text().splitlines()]
    assert valid == [not fingerprint] * 4  # copies of the template, scored as it was, or rejected clones of it
    going = running_copy(run, tmp_path / "going")
    with client(run, going) as http:
        ended, running = http.get("/api/run/run").json(), http.get("/api/run/going").json()
        listed = {r["name"]: r for r in http.get("/api/runs").json()["runs"]}
    for row in (ended, running, listed["run"], listed["going"]):
        assert (row["best_id"], row["best"]) == (0, summary["best"]["objective"])
    assert reader.HeuristicRun(going).ranks().get(0) is None  # the seeded template keeps its rankless table row


def test_a_best_that_beats_the_template_is_still_the_summarys(stub, tmp_path):
    """The template in the ranking only where it is best: a run whose summary names a proposal keeps it."""
    run = template_run(tmp_path, stub.base_url, fingerprint=False)
    better = tmp_path / "better"
    shutil.copytree(run, better)
    lines = [json.loads(line) for line in (better / "candidates.jsonl").read_text().splitlines()]
    lines[2] = {**lines[2], "objective": lines[2]["objective"] - 1.0, "duplicate_of": None}
    (better / "candidates.jsonl").write_text("".join(json.dumps(c) + "\n" for c in lines))
    summary = json.loads((better / "summary.json").read_text())
    summary["best"] = {**summary["best"], "id": 3, "objective": lines[2]["objective"]}
    (better / "summary.json").write_text(json.dumps(summary))
    going = running_copy(better, tmp_path / "going")
    assert [reader.HeuristicRun(d).row()["best_id"] for d in (better, going)] == [3, 3]


def test_the_run_page_links_the_template_as_its_best(stub, tmp_path, browser):  # noqa: F811
    """Id 0 is a best to link and open (the page once took it for none)."""
    run = template_run(tmp_path, stub.base_url, fingerprint=False)
    dashboard, url = start_dashboard(run)
    try:
        browser.get(url + "#/run/run")
        link = "const a = document.querySelector('#run-stats a'); return a && [a.textContent, a.getAttribute('href')]"
        # waited for until it is this (the page polls): a first draw may come before the run's data
        wait(browser, lambda d: js(d, link) == ["#0", "#/run/run/c/0"], what="a link to #0 beside the best")
        browser.find_element("id", "best-button").click()
        title = "const h = document.getElementById('cand-title'); return h && h.textContent"
        wait(browser, lambda d: js(d, title) == "Candidate #0", what="the best button opening #0")
    finally:
        dashboard.terminate()
        dashboard.wait(timeout=30)
