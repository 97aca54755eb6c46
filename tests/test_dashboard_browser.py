"""`coevolve dashboard` in a real headless browser (Debian's chromium driven
by Selenium through /usr/bin/chromedriver; scripts/setup.sh installs both).

One short real `coevolve run` (eoh+esopt, 14 evaluations, 2 ES generations,
real engine and sandbox) is started first; the dashboard is started on its
directory while it is still being written, next to the committed comparison
benchmarks/results/pipeline_check_eoh_esopt_tsp and a hand-made run holding
hostile text and a torn last line. A second dashboard, without the engine,
serves the comparison beside a folder of two runs of one name (ids and the
comparison's numbers). Set COEVOLVE_DASHBOARD_SCREENSHOTS=docs/img
to refresh the screenshots docs/dashboard.md shows.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coevolve.base.durable import read_jsonl
from coevolve.base.records import read_summary
from coevolve.base.untrusted import clean
from coevolve.report.rendering import run_table_rows
from conftest import ROOT, start_run

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
COMPARISON = ROOT / "benchmarks" / "results" / "pipeline_check_eoh_esopt_tsp"
# 6 initial programs, then e1, e2, m1 (ES), m2 (ES) with 2 each: 14 evaluations,
# 2 ES generations. With these sampling settings the embedded model's fifth
# initial program is the valid template and m2 yields a valid child of it,
# so the run has a best and a valid candidate with a parent.
TINY = """\
[run]
method = "eoh+esopt"
task = "tsp_construct"
budget = 14
seed = 0

[sampling]
temperature = 0.7
top_p = 1.0
max_tokens = 320

[eoh]
population = 6
offspring = 2

[es]
population = 2
sigma = 1e-3
alpha = 5e-4

[sandbox]
timeout_s = 20

# clones rejected, as when these checks were written: the tiny run then has candidates with parents by the
# time the detail and diff checks run
[context]
fingerprint = true

[log]
mlflow = true
tensorboard = true
"""
HOSTILE = '<img src=x onerror="window.__pwned=1">\x1b[2J</pre><script>window.__pwned=2</script>'

pytestmark = [pytest.mark.engine, pytest.mark.timeout(900)]


ARMS = ["eoh-cold: EoH with sampling.temperature = 0.2",
        'eoh-stop: EoH with sampling.stop = ["<img src=x onerror=alert(1)>"]']


def arms_comparison(path: Path) -> None:
    """The committed comparison (its report, no runs) with named arms in a results.json, one of them markup."""
    import json

    shutil.copytree(COMPARISON, path)
    (path / "results.json").write_text(json.dumps({"named_arms": ARMS}))


def hostile_run(path: Path) -> None:
    """A run directory written by hand: one candidate whose idea and message
    are markup and terminal escapes, a valid one whose note is, and a torn last line."""
    import json

    path.mkdir()
    (path / "config.toml").write_text('[run]\nmethod = "eoh"\ntask = "tsp_construct"\nbudget = 4\nseed = 1\n')
    good = {"id": 1, "step": 0, "operator": "i1", "parents": [], "model_state": {"kind": "base"},
            "code": "def f():\n    return '</pre><b>x</b>'\n", "idea": HOSTILE, "objective": None,
            "failure": "exception", "message": HOSTILE, "seconds": 0.1, "duplicate_of": None, "reward": None}
    # a valid one whose note (the task's feedback) is the same markup
    noted = {**good, "id": 2, "objective": 7.5, "failure": None, "message": "", "feedback": HOSTILE,
             "skill_version": 3}  # proposed under the run's skills/v003
    (path / "candidates.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(noted) + "\n"
                                           + '{"id": 3, "step": 0, "oper')
    # the step's replies as the model wrote them: candidate 1's is the markup too
    step = {"type": "step", "step": 0, "operator": "i1", "completions": [{"text": HOSTILE}, {"text": "{x}"}],
            "requests": [{"slot": 0, "skill": None}, {"slot": 1, "skill": 3}]}  # the version each request showed
    # a skill version whose text is the markup, and a judged trial (skill.keep = "judged")
    refresh = {"type": "step", "step": 1, "operator": "distill", "completions": [],
               "skill": {"version": 3, "step": 1, "text": HOSTILE},
               "trial": {"step": 1, "since": 0, "incumbent": None, "challenger": 2, "kept": None, "distinct": False,
                         "interval": [-0.6, 0.6], "children": {"challenger": {"candidates": 2, "valid": 0, "improved": 0},
                                                               "incumbent": {"candidates": 2, "valid": 1, "improved": 1}}}}
    (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ({"type": "start", "version": 1}, step, refresh)))


def seeded_run(path: Path) -> None:
    """A run directory written by hand whose archive started with the template (0) and a [start] program
    (-1): seed events, as the loop logs them, and a child of each."""
    import json

    path.mkdir()
    (path / "config.toml").write_text('[run]\nmethod = "eoh"\ntask = "tsp_construct"\nbudget = 4\nseed = 1\n')
    code = "def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):\n"
    children = [{"id": 1, "step": 0, "operator": "e1", "parents": [-1], "model_state": {"kind": "base"},
                 "code": code + "    return unvisited_nodes[1]\n", "idea": "the second", "objective": 6.0,
                 "failure": None, "message": "", "seconds": 0.1, "duplicate_of": None, "reward": None},
                {"id": 2, "step": 0, "operator": "e1", "parents": [0], "model_state": {"kind": "base"},
                 "code": code + "    return x\n", "idea": "a name error", "objective": None,
                 "failure": "exception", "message": "NameError: name 'x' is not defined", "seconds": 0.1,
                 "duplicate_of": None, "reward": None}]
    (path / "candidates.jsonl").write_text("".join(json.dumps(c) + "\n" for c in children))
    events = [{"type": "start", "version": 1}, {"type": "seed", "id": 0, "result": {"objective": 7.0}},
              {"type": "seed", "id": -1, "path": "/x/mine.py", "code": code + "    return unvisited_nodes[0]\n",
               "result": {"objective": 6.5}}]
    (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


@pytest.fixture(scope="module")
def browser():
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: run scripts/setup.sh (it installs chromium and chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1400,1800", "--disable-extensions", "--no-first-run"):
        options.add_argument(flag)
    # Service with an explicit path: Selenium Manager never downloads a driver
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """The run (still going when the dashboard starts) and the dashboard's URL."""
    root = tmp_path_factory.mktemp("dashboard")
    config = root / "tiny.toml"
    config.write_text(TINY)
    run_dir = root / "live-run"
    hostile_run(root / "hostile-run")
    seeded_run(root / "seeded-run")
    arms_comparison(root / "arms-compare")
    run = start_run(str(config), "--out", str(run_dir), "--no-progress")
    deadline = time.time() + 120
    while not (run_dir / "config.toml").exists():
        assert run.poll() is None and time.time() < deadline, run.stdout.read() if run.poll() is not None else "no config.toml"
        time.sleep(0.2)
    dashboard, url = start_dashboard(run_dir, COMPARISON, root / "hostile-run", root / "arms-compare",
                                     root / "seeded-run")
    yield {"url": url, "dir": run_dir, "run": run, "root": root}
    for process in (run, dashboard):
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=30)


def start_dashboard(*directories: Path, refresh: float = 1.0) -> tuple[subprocess.Popen, str]:
    """`coevolve dashboard DIRECTORIES` on a free port, and the address it announced."""
    dashboard = subprocess.Popen([sys.executable, "-m", "coevolve.cli", "dashboard", *map(str, directories),
                                  "--port", "0", "--refresh", str(refresh)],
                                 cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = dashboard.stdout.readline()
    match = re.search(r"http://\S+/", line)
    assert match, line + dashboard.stdout.read() if dashboard.poll() is not None else line
    return dashboard, match.group(0)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A dashboard on the committed comparison and on a folder of two runs of one name (runs/zeta/eoh-b12-s0,
    then runs/alpha/eoh-b12-s0, listed before it); no engine."""
    root = tmp_path_factory.mktemp("served")
    for task in ("zeta", "alpha"):
        (root / "runs" / task).mkdir(parents=True)
        seeded_run(root / "runs" / task / "eoh-b12-s0")
    dashboard, url = start_dashboard(COMPARISON, root / "runs")
    yield {"url": url, "runs": root / "runs"}
    dashboard.terminate()
    dashboard.wait(timeout=30)


def wait(driver, condition, timeout: float = 60.0, what: str = ""):
    from selenium.webdriver.support.ui import WebDriverWait

    # every poll is a script run in Chromium, which shares the two cores with the live run's engine
    return WebDriverWait(driver, timeout, poll_frequency=0.5).until(lambda d: condition(d), message=what)


def js(driver, script: str, *args):
    return driver.execute_script(script, *args)


def shoot(driver, live: dict, name: str) -> None:
    """A full-page screenshot; copied to $COEVOLVE_DASHBOARD_SCREENSHOTS for the docs."""
    for _ in range(2):  # the layout changes with the width of the window's scrollbar: measure twice
        height = js(driver, "return document.documentElement.scrollHeight")
        driver.set_window_size(1400, min(max(height + 140, 900), 3600))
        time.sleep(0.3)
    path = live["root"] / f"{name}.png"
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000  # a rendered page, not a blank one
    target = os.environ.get("COEVOLVE_DASHBOARD_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / path.name)
    driver.set_window_size(1400, 1800)


def finished(run_dir: Path) -> bool:
    return any(e.get("type") == "end" for e in read_jsonl(run_dir / "events.jsonl"))


def test_runs_list_shows_the_running_run(browser, live):
    browser.get(live["url"] + "#/")
    # rows are redrawn while the run moves: read the row's text in one script call
    row = "return (document.querySelector(\"#runs-table tr[data-id='live-run']\") || {}).textContent"
    text = wait(browser, lambda d: js(d, row), what="the live run in the runs list")
    assert "tsp_construct" in text and "eoh+esopt" in text
    if not finished(live["dir"]):
        assert "running" in text
    assert browser.find_elements("css selector", "#runs-table tr[data-id='pipeline_check_eoh_esopt_tsp']")


def test_best_so_far_curve_gains_points_while_the_run_goes(browser, live):
    browser.get(live["url"] + "#/run/live-run")
    points = "const g = document.getElementById('best-chart'); return g && g.data ? g.data[0].x.length : 0"
    first = wait(browser, lambda d: js(d, points) or None, timeout=300, what="a first point on the curve")
    assert not finished(live["dir"]), "the run ended before the page drew its first point"
    # running by its writer lock, which `coevolve run` holds: the page names the holder
    writer = "return (document.getElementById('run-writer') || {}).textContent"
    holder = wait(browser, lambda d: js(d, writer), what="the run's writer")
    assert re.fullmatch(rf" · written by pid {live['run'].pid} on \S+, since \d\d:\d\d", holder), holder
    later = wait(browser, lambda d: (n := js(d, points)) > first and n, timeout=300, what="more points")
    assert later > first
    assert live["run"].wait(timeout=600) == 0, live["run"].stdout.read()
    total = len(read_jsonl(live["dir"] / "candidates.jsonl"))
    wait(browser, lambda d: js(d, points) == total, what="every candidate on the curve")
    # in one script call: the page may redraw the element between a find and a read
    state = "return (document.getElementById('run-state') || {}).textContent"
    wait(browser, lambda d: js(d, state) == "finished", what="state finished")
    assert not browser.find_element("id", "skill-panel").is_displayed()  # no skill: no panel
    # valid programs of their own, counted here from the finished run's candidates
    valid = [c for c in read_jsonl(live["dir"] / "candidates.jsonl") if c["objective"] is not None]
    distinct = sum(c["duplicate_of"] is None for c in valid)
    shown = js(browser, "return (document.getElementById('run-distinct') || {}).textContent || ''")
    repeats = len(valid) - distinct
    assert shown == (f" ({distinct} distinct program{'' if distinct == 1 else 's'}, {repeats} repeat"
                     f"{'' if repeats == 1 else 's'})" if distinct < len(valid) else "")
    # the table the run printed when it ended, row for row, above the charts
    printed = run_table_rows(read_summary(live["dir"] / "summary.json"), live["dir"].resolve())
    cells = ("const p = document.getElementById('run-table-panel'); return p && !p.hidden ? "
             "[...p.querySelectorAll('#run-table tr')].map((tr) => [...tr.cells].map((td) => td.textContent)) : null")
    rows = wait(browser, lambda d: js(d, cells), what="the run table")
    assert rows == [[clean(name), clean(value)] for name, value in printed]
    assert "beat the template" in dict(rows) and browser.find_element("id", "run-table").is_displayed()
    shoot(browser, live, "dashboard-run")


def candidates(live: dict) -> list[dict]:
    return read_jsonl(live["dir"] / "candidates.jsonl")


def open_candidate(browser, live: dict, cid: int) -> None:
    browser.get(live["url"] + "#/run/live-run")
    row = wait(browser, lambda d: d.find_elements("css selector", f"#cand-table tr[data-cid='{cid}']"),
               what=f"candidate {cid} in the table")[0]
    row.click()
    wait(browser, lambda d: d.find_element("id", "cand-detail").find_elements("id", "cand-title")
         and d.find_element("id", "cand-title").text == f"Candidate #{cid}", what=f"detail of {cid}")


def test_clicking_the_best_candidate_shows_its_code_and_a_diff(browser, live):
    records = candidates(live)
    valid = [c for c in records if c["objective"] is not None]
    assert valid, "the run produced no valid candidate"
    best = min(valid, key=lambda c: (c["objective"], c["id"]))
    browser.get(live["url"] + "#/run/live-run")
    wait(browser, lambda d: d.find_elements("css selector", "#cand-table tr"), what="the candidate table")
    browser.find_element("id", "best-button").click()
    wait(browser, lambda d: d.find_elements("id", "cand-code") and d.find_element("id", "cand-title").text
         == f"Candidate #{best['id']}", what="the best candidate's detail")
    assert browser.find_element("id", "cand-code").text.strip() == clean(best["code"]).strip()
    # the diff: of the best when it has a parent, else of the best-ranked candidate that has one
    with_parent = [c for c in records if c["parents"] and c["code"] is not None]
    if not with_parent:
        # nothing valid early enough for the plan to pick parents (the model's output differs by weight
        # type and machine): every candidate is initial, and the best's page says it has no parent
        assert not best["parents"] and "no parent (initial population)" in browser.find_element(
            "id", "cand-detail").text
        shoot(browser, live, "dashboard-candidate")
        return
    ranked = sorted(with_parent, key=lambda c: (c["objective"] is None, c["objective"] or 0.0, c["id"]))
    chosen = best if best["parents"] else ranked[0]
    open_candidate(browser, live, chosen["id"])
    by_id = {c["id"]: c for c in records}
    parent = by_id[chosen["parents"][0]]
    expected = list(difflib.unified_diff((parent["code"] or "").splitlines(), chosen["code"].splitlines(),
                                         f"candidate {parent['id']}", f"candidate {chosen['id']}", lineterm="", n=3))
    shown = wait(browser, lambda d: d.find_elements("css selector", f"#cand-diff pre[data-parent='{parent['id']}']"),
                 what="the diff against the parent")[0]
    if expected:
        assert shown.text.splitlines()[:2] == [clean(x) for x in expected[:2]]
        assert len(shown.find_elements("css selector", "span")) == len(expected)
    else:
        assert "same code" in shown.text
    shoot(browser, live, "dashboard-candidate")


def test_a_failed_candidate_shows_its_message(browser, live):
    failed = [c for c in candidates(live) if c["objective"] is None and c["duplicate_of"] is None and c["message"]]
    assert failed, "every candidate of the run was valid"
    chosen = next((c for c in failed if c["failure"] != "parse"), failed[0])
    open_candidate(browser, live, chosen["id"])
    message = browser.find_element("id", "cand-message").text
    assert message.strip() == clean(chosen["message"], 4000).strip()
    assert chosen["failure"] in browser.find_element("id", "cand-detail").text
    # the reply it came from, as the model wrote it: its step event's completion for its slot
    step = next(e for e in read_jsonl(live["dir"] / "events.jsonl") if e.get("step") == chosen["step"])
    slot = sorted(c["id"] for c in candidates(live) if c["step"] == chosen["step"]).index(chosen["id"])
    box = browser.find_element("id", "cand-reply-box")
    if box.get_attribute("open") is None:
        box.find_element("css selector", "summary").click()
    assert browser.find_element("id", "cand-reply").text.strip() == clean(step["completions"][slot]["text"]).strip()
    # and the prompt it was sent ([log] prompts, on by default): its request's messages
    records = read_jsonl(live["dir"] / "prompts.jsonl")
    digest = next(r["sha256"] for r in reversed(records) if (r["step"], r["slot"]) == (chosen["step"], slot))
    messages = next(r["messages"] for r in records if r["sha256"] == digest and "messages" in r)
    browser.find_element("css selector", "#cand-prompt-box summary").click()
    shown = [e.text.strip() for e in browser.find_elements("css selector", "#cand-prompt-box pre.cand-prompt")]
    assert shown == [clean(m["content"]).strip() for m in messages]


def test_es_panel_shows_the_generations_of_history(browser, live):
    history = read_jsonl(live["dir"] / "history.jsonl")
    assert len(history) == 2  # m1 and m2 of the tiny plan
    browser.get(live["url"] + "#/run/live-run")
    table = ("return [...document.querySelectorAll('#es-table tbody tr[data-generation]')]"
             ".map((tr) => [...tr.cells].map((td) => td.textContent))")
    rows = wait(browser, lambda d: js(d, table), what="ES rows")
    assert len(rows) == len(history)
    for cells, record in zip(rows, history):
        assert cells[0] == str(record["generation"])
        assert len(cells[4].split(",")) == len(record["rewards"])
        assert record["checksum"].startswith(cells[7])
        equal = len(set(record["rewards"])) == 1
        assert cells[6].startswith("yes") == equal
    assert js(browser, "return document.getElementById('es-chart').data[0].y.length") == sum(
        len(r["rewards"]) for r in history)


def test_a_comparison_renders_its_table(browser, live):
    import csv

    with open(COMPARISON / "table.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    browser.get(live["url"] + "#/compare/pipeline_check_eoh_esopt_tsp")
    rows = wait(browser, lambda d: d.find_elements("css selector", "#compare-table tbody tr"), what="the table")
    assert len(rows) == len(table)
    assert "eoh -> eoh+esopt" in rows[-1].text
    def plots_loaded(d):
        imgs = d.find_elements("css selector", "img.plot")
        loaded = imgs and all(d.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 100", i)
                              for i in imgs)
        return imgs if loaded else None

    images = wait(browser, plots_loaded, what="the plots")
    assert len(images) == len(list((COMPARISON / "plots").glob("*.png")))
    assert len(browser.find_elements("css selector", "#compare-runs tbody tr")) == 6
    shoot(browser, live, "dashboard-comparison")
    browser.get(live["url"] + "#/")
    wait(browser, lambda d: d.find_elements("css selector", "#runs-table tr[data-id='live-run']"), what="runs list")
    shoot(browser, live, "dashboard-runs")


def test_a_comparisons_numbers_render_as_its_csv_cells_did(browser, served):
    """The compare JSON gives numbers as numbers: the page shows each cell as it showed the CSV's text
    (a number to five significant digits, an empty cell empty), the arm runs too; a fraction (gap, valid
    rate, Δ) as report.md shows it (22.17%), as the API's `shown` says."""
    import csv

    from coevolve.dashboard import reader

    def read(name: str) -> list[dict[str, str]]:
        with open(COMPARISON / name, newline="") as handle:
            return list(csv.DictReader(handle))

    table, runs = read("table.csv"), read("runs.csv")
    browser.get(served["url"] + "#/compare/pipeline_check_eoh_esopt_tsp")
    cells = ("return [...document.querySelectorAll(arguments[0] + ' tbody tr')]"
             ".map((tr) => [...tr.cells].map((td) => td.textContent))")
    shown = wait(browser, lambda d: js(d, cells, "#compare-table"), what="the table")
    # what the page made of a CSV cell's text before the API gave numbers, with the page's own fmt
    before = "return arguments[0].map((row) => row.map((s) => (s === '' || isNaN(Number(s)) ? s : fmt(Number(s)))))"
    api = reader.comparison(COMPARISON, reader.Registry.open([COMPARISON]))
    assert shown == [[row["shown"].get(key, value) for key, value in zip(raw, formatted)]
                     for row, raw, formatted in zip(api["rows"], table, js(browser, before, [list(r.values()) for r in table]))]
    assert shown[0][list(table[0]).index("objective_mean")] == "6.9542"  # five significant digits
    assert shown[0][list(table[0]).index("gap_mean")] == "22.17%"  # report.md: 22.17% ± 0.00%
    raw = [[r[k] for k in ("task", "method", "budget", "seed", "state", "objective", "gap", "dir")] for r in runs]
    expected = [row[:5] + [formatted[0], f"{100 * float(row[6]):.2f}%"] + row[7:] for row, formatted in
                zip(raw, js(browser, before, [row[5:7] for row in raw]))]
    assert js(browser, cells, "#compare-runs") == expected


def test_an_interrupted_comparison_lists_its_runs_and_a_valid_repeat_is_drawn_valid(browser, tmp_path):
    """Walkthrough s52: an interrupted comparison (no report) lists its planned runs as they stand, the one
    it interrupted stopped at once (its writer lock is free), and says when its table and plots come
    (finding 3); a valid repeat is a bar of its own, in the valid green's lighter shade, not the duplicates'
    grey (finding 11); an initial population charged outside T is said as the run table says it (finding 9)."""
    from coevolve.base.config import build_config
    from coevolve.search.runconfig import RunConfig
    from test_dashboard import candidate, interrupted_comparison, make_run
    from test_search_loop import run as search_run

    interrupted_comparison(tmp_path / "cmp")
    make_run(tmp_path / "repeats", [candidate(1, 0, [], 7.0), {**candidate(2, 1, [1], 7.0), "duplicate_of": 1}])
    search_run(tmp_path / "outside", build_config(RunConfig, {
        "run": {"method": "eoh", "task": "fake", "budget": 12, "seed": 0},
        "eoh": {"population": 4, "offspring": 3, "init_in_budget": False}}))
    dashboard, url = start_dashboard(tmp_path / "cmp", tmp_path / "repeats", tmp_path / "outside")
    try:
        browser.get(url + "#/compare/cmp")
        note = "return (document.getElementById('compare-note') || {}).textContent"
        said = wait(browser, lambda d: js(d, note), what="the note on the report")
        assert said.startswith("1 of 4 runs finished. The table, verdicts and plots come when the report is rendered")
        states = "return [...document.querySelectorAll('#compare-runs tbody tr')].map((tr) => tr.cells[4].textContent)"
        assert wait(browser, lambda d: js(d, states), what="the arm runs") == ["finished", "stopped", "new", "new"]
        # the comparison itself let go of its folder when it was interrupted (run_comparison releases it, in
        # this process that goes on as in a notebook): stopped, written by no one
        held = js(browser, "return document.getElementById('compare-state').textContent")
        assert held == "stopped", held
        browser.get(url + "#/run/outside")
        spent = "return (document.getElementById('run-spent') || {}).textContent"
        said = wait(browser, lambda d: js(d, spent), what="the evaluations")
        assert said == "16/12 (+ 4 initial outside T) evaluations"
        browser.get(url + "#/run/repeats")
        bars = ("const g = document.getElementById('outcome-step-chart');"
                "return g && g.data ? g.data.map((t) => [t.name, t.y, t.marker.color]) : null")
        assert wait(browser, lambda d: js(d, bars), what="the outcome bars") == [
            ["valid", [1, 0], "#1a9850"], ["valid repeat", [0, 1], "#91cf60"]]
    finally:
        dashboard.terminate()
        dashboard.wait(timeout=30)


def test_an_archive_runs_page_draws_its_islands_its_grid_or_its_front(browser, tmp_path):
    """The archive panel of islands, MAP-Elites and Pareto runs (the real loop and each method's own
    snapshots, on the fake engine), as the reader gives it: an island per row with its best linked, the
    grid as a heat map (darker is better, empty cells blank, a cell opens its elite), the front with the
    instances each program wins; a snapshot of the wrong shape named in the panel, the page served as
    ever; no panel for a method without such an archive."""
    import json

    from coevolve.base.config import build_config
    from coevolve.search.runconfig import RunConfig
    from test_dashboard import archive_run
    from test_search_loop import run as search_run

    _, islands = archive_run(tmp_path / "isl", "islands", 29, islands={"islands": 4, "reset_every": 9})
    grid_snap, grid = archive_run(tmp_path / "grid", "map_elites", 40,
                                  map_elites={"descriptors": ["level", "lines"], "bins": 5})
    _, front = archive_run(tmp_path / "front", "pareto", 29)
    snap, _ = archive_run(tmp_path / "broken", "pareto", 12)
    broken = f"population/gen_{snap['step'] + 1:04d}.json"
    (tmp_path / "broken" / broken).write_text(json.dumps({**snap, "pareto": {**snap["pareto"], "wins": "all"}}))
    search_run(tmp_path / "eoh", build_config(RunConfig, {"run": {"method": "eoh", "task": "fake", "budget": 12,
                                                                  "seed": 0}}))
    rows = ("return [...document.querySelectorAll(arguments[0] + ' tbody tr')]"
            ".map((tr) => [...tr.cells].map((td) => td.textContent.trim()))")
    dashboard, url = start_dashboard(*(tmp_path / name for name in ("isl", "grid", "front", "broken", "eoh")))
    try:
        browser.get(url + "#/run/isl")
        shown = wait(browser, lambda d: js(d, rows, "#archive-islands"), what="the islands")
        assert shown == [[str(i["island"]), str(i["size"]), js(browser, "return fmt(arguments[0])", i["best"]),
                          f"#{i['best_id']}", str(i["resets"])] for i in islands["islands"]]
        assert browser.find_element("id", "archive-title").text == "Archive: islands"
        assert browser.find_element("id", "archive-note").text == (
            f"after step {islands['step']}, 29 evaluations (population/gen_{islands['step']:04d}.json)")
        assert browser.find_element("id", "archive-summary").text == (
            f"4 islands, {islands['resets']} resets so far (each empties the worse half)")
        browser.find_element("css selector", "#archive-islands tbody tr a").click()
        title = wait(browser, lambda d: js(d, "return (document.getElementById('cand-title') || {}).textContent"),
                     what="the island's best opened")
        assert title == f"Candidate #{islands['islands'][0]['best_id']}"

        browser.get(url + "#/run/grid")
        cells = wait(browser, lambda d: d.find_elements("css selector", "#archive-grid td.elite"), what="the grid")
        assert len(cells) == len(grid_snap["grid"]["cells"]) == grid["filled"]
        assert len(browser.find_elements("css selector", "#archive-grid td.empty")) == 25 - grid["filled"]
        assert browser.find_element("id", "archive-summary").text == (
            f"{grid['filled']} of 25 cells filled · 0 undescribed (valid programs whose descriptors are not all "
            "finite, kept out of the grid)")
        head = js(browser, "return [...document.querySelectorAll('#archive-grid thead th')].map((th) => th.textContent)")
        assert head == ["lines ↓  level →", "0–20", "20–40", "40–60", "60–80", "80–100"]
        sides = js(browser, "return [...document.querySelectorAll('#archive-grid tbody th')].map((th) => th.textContent)")
        assert sides == ["48.2–60", "36.4–48.2", "24.6–36.4", "12.8–24.6", "1–12.8"]  # the highest lines on top
        # each elite in its cell (row: lines from the top, column: level), its objective as text and tooltip
        placed = js(browser, "return [...document.querySelectorAll('#archive-grid td.elite')].map((td) =>"
                             " [td.parentNode.rowIndex, td.cellIndex, Number(td.dataset.cid), td.title])")
        assert sorted((row, column, cid) for row, column, cid, _ in placed) == sorted(
            (5 - c["cell"][1], c["cell"][0] + 1, c["id"]) for c in grid_snap["grid"]["cells"])
        assert all(title.startswith(f"#{cid}: objective ") for _, _, cid, title in placed)
        # lower is better here: the lowest objective is the darkest cell
        shade = ("return [...document.querySelectorAll('#archive-grid td.elite')].map((td) => [Number(td.dataset.cid),"
                 " getComputedStyle(td).backgroundColor.match(/\\d+/g).slice(0, 3).map(Number).reduce((a, b) => a + b)])")
        brightness = dict(js(browser, shade))
        objectives = {c["id"]: c["objective"] for c in grid_snap["grid"]["cells"]}
        assert min(brightness, key=brightness.get) == min(objectives, key=objectives.get)
        assert max(brightness, key=brightness.get) == max(objectives, key=objectives.get)
        best = min(objectives, key=objectives.get)
        browser.find_element("css selector", f"#archive-grid td[data-cid='{best}']").click()
        title = wait(browser, lambda d: js(d, "return (document.getElementById('cand-title') || {}).textContent"),
                     what="the elite opened")
        assert title == f"Candidate #{best}"

        browser.get(url + "#/run/front")
        shown = wait(browser, lambda d: js(d, rows, "#archive-front"), what="the front")
        assert shown == [[f"#{w['id']}", js(browser, "return fmt(arguments[0])", w["objective"]), f"{w['wins']} of 4",
                          js(browser, "return pct(arguments[0])", w["share"])] for w in front["front"]]
        assert browser.find_element("id", "archive-summary").text == (
            f"{len(front['front'])} programs on the front, each the best on some of the 4 training instances"
            " · 0 unprofiled (valid programs without per-instance objectives, kept out)")

        browser.get(url + "#/run/broken")
        note = wait(browser, lambda d: js(d, "const n = document.getElementById('archive-note');"
                                             "return n && n.className === 'error' ? n.textContent : null"),
                    what="the broken snapshot named")
        assert note.startswith(f"cannot show {broken}: unexpected file content: {tmp_path / 'broken' / broken}: "
                               "not a valid ParetoSnapshot: pareto.wins: Input should be a valid list"), note
        # the rest of the page as ever (read by script: the run's line is drawn again on every poll)
        assert js(browser, "return document.getElementById('run-best').textContent") != "–"
        assert "error" not in browser.find_element("id", "status").get_attribute("class")

        browser.get(url + "#/run/eoh")
        wait(browser, lambda d: js(d, "return (document.getElementById('run-title') || {}).textContent") ==
             str(tmp_path / "eoh"), what="the eoh run")
        wait(browser, lambda d: d.find_elements("css selector", "#pop-table tbody tr"), what="its population")
        assert not browser.find_element("id", "archive-panel").is_displayed()
    finally:
        dashboard.terminate()
        dashboard.wait(timeout=30)


def test_an_id_is_the_runs_path_and_an_old_link_says_not_found(browser, served):
    """A run opens by the id its path gives, whatever was found before it; a link with an id no directory
    has (the old discovery-order one of the second run named eoh-b12-s0) says so on the page."""
    runs = served["runs"]
    browser.get(served["url"] + "#/")
    ids = ("return [...document.querySelectorAll('#runs-table tbody tr')]"
           ".map((tr) => [tr.dataset.id, tr.cells[0].title])")
    listed = dict(wait(browser, lambda d: (rows := js(d, ids)) and len(rows) == 3 and rows, what="the runs list"))
    assert listed == {"pipeline_check_eoh_esopt_tsp": str(COMPARISON),
                      "runs~alpha~eoh-b12-s0": str(runs / "alpha" / "eoh-b12-s0"),
                      "runs~zeta~eoh-b12-s0": str(runs / "zeta" / "eoh-b12-s0")}
    browser.get(served["url"] + "#/run/runs~zeta~eoh-b12-s0")
    title = "return (document.getElementById('run-title') || {}).textContent"
    wait(browser, lambda d: js(d, title) == str(runs / "zeta" / "eoh-b12-s0"), what="the run its id names")
    browser.get(served["url"] + "#/run/eoh-b12-s0-2")
    said = "return (document.getElementById('not-found') || {}).textContent"
    message = wait(browser, lambda d: js(d, said), what="the not-found message")
    assert message.startswith("not found: no run or comparison here has the id 'eoh-b12-s0-2'")
    assert not browser.find_elements("id", "run-title")  # no run shown in its place
    browser.find_element("link text", "all runs and comparisons").click()
    wait(browser, lambda d: d.find_elements("css selector", "#runs-table tbody tr"), what="back to the runs list")


def test_a_reference_that_exits_shows_no_gap_and_says_why(browser, tmp_path):
    """A run whose task's reference() exits the dashboard's process (guarded there): the runs list and the
    run's page show "no reference" where the gap goes, exited()'s line as its tooltip, the page served."""
    from test_archive_snapshots import run_whose_reference

    run, line = run_whose_reference(tmp_path, "sys.exit(6)")
    dashboard, url = start_dashboard(run)
    try:
        browser.get(url + "#/")
        gap = "const tr = document.querySelector('#runs-table tbody tr'); return tr && [tr.cells[7].textContent, tr.cells[7].title]"
        assert wait(browser, lambda d: js(d, gap), what="the run's row") == ["no reference", line]
        browser.get(url + "#/run/run")
        said = "const s = document.getElementById('run-no-reference'); return s && [s.textContent, s.title]"
        assert wait(browser, lambda d: js(d, said), what="the run's page") == ["no reference", line]
        assert dashboard.poll() is None
    finally:
        dashboard.terminate()
        dashboard.wait(timeout=30)


def test_a_comparisons_named_arms_are_listed_as_text(browser, live):
    browser.get(live["url"] + "#/compare/arms-compare")
    items = wait(browser, lambda d: d.find_elements("css selector", "#compare-arms li"), what="the named arms")
    assert [item.text for item in items] == ARMS
    assert not browser.find_elements("css selector", "#compare-arms img")  # markup in a setting stays text


def test_hostile_text_is_shown_as_text(browser, live):
    browser.get(live["url"] + "#/run/hostile-run/c/1")
    idea = wait(browser, lambda d: d.find_elements("id", "cand-idea"), what="the hostile candidate")[0]
    shown = clean(HOSTILE)
    assert idea.text == shown and "\x1b" not in idea.text
    assert browser.find_element("id", "cand-message").text == shown
    assert browser.find_element("id", "cand-code").text.strip() == "def f():\n    return '</pre><b>x</b>'"
    assert not browser.find_elements("css selector", "#cand-detail img, #cand-detail script, #cand-code b")
    assert js(browser, "return window.__pwned === undefined")
    causes = wait(browser, lambda d: d.find_elements("id", "run-causes"), what="the commonest failures")[0]
    assert causes.text.startswith("commonest failures: ")
    assert not browser.find_elements("css selector", "#run-causes img, #run-causes script, #run-causes b")
    assert not browser.find_elements("id", "cand-skill")  # no skill shown to its request
    browser.find_element("css selector", "#cand-reply-box summary").click()  # closed: the code was extracted
    assert browser.find_element("id", "cand-reply").text == shown
    assert not browser.find_elements("css selector", "#cand-detail img, #cand-detail script")
    browser.get(live["url"] + "#/run/hostile-run/c/2")
    note = wait(browser, lambda d: d.find_elements("id", "cand-feedback"), what="the note of candidate 2")[0]
    assert note.text == shown and not browser.find_elements("id", "cand-message")
    assert browser.find_element("id", "cand-skill").text == "skill v003"
    assert not browser.find_elements("css selector", "#cand-detail img, #cand-detail script")
    assert js(browser, "return window.__pwned === undefined")
    # the skill panel: the version's text as text, the requests each version showed, the trial in the run table's words
    text = wait(browser, lambda d: [e for e in d.find_elements("id", "run-skill-text") if e.is_displayed()],
                what="the skill panel")[0]
    assert text.text == shown and not browser.find_elements("css selector", "#skill-panel img, #skill-panel script")
    rows = [r.text for r in browser.find_elements("css selector", "#skill-table tbody tr")]
    assert rows == ["no skill 1 0 0", "v003 1 1 1"]
    assert browser.find_element("css selector", "#skill-trials li").text.startswith(
        "v002 dropped, no skill stays at step 1: v002 improved 0/2 (valid 0); no skill improved 1/2 (valid 1)")
    assert js(browser, "return window.__pwned === undefined")
    # the torn last line is not a candidate (yet): two rows, no error
    rows = wait(browser, lambda d: d.find_elements("css selector", "#cand-table tbody tr"), what="the table")
    assert len(rows) == 2 and "error" not in browser.find_element("id", "status").get_attribute("class")
    # an eoh run moves no weights: the ES panel says so
    es = wait(browser, lambda d: d.find_element("css selector", "#es-table tbody").text, what="the ES panel")
    assert es == "eoh runs no ES generations: the weights stay as loaded"
    assert not browser.find_element("id", "run-table-panel").is_displayed()  # no summary.json: no run table


def test_seeded_programs_are_in_the_table_and_the_tree(browser, live):
    """The template and a [start] program are rows of the table and roots of the tree, marked seeded, and
    open from their row; the run's line counts them apart from its proposals."""
    browser.get(live["url"] + "#/run/seeded-run")
    cells = ("return [...document.querySelectorAll('#cand-table tbody tr')]"
             ".map((tr) => [tr.dataset.cid, tr.dataset.outcome, tr.cells[3].title])")
    rows = wait(browser, lambda d: (r := js(d, cells)) and len(r) == 4 and r, what="the table with its seeded rows")
    seeded = "seeded: scored before the first step, not proposed and not charged to the budget"
    assert rows == [["0", "seeded", seeded], ["-1", "seeded", seeded], ["1", "valid", ""], ["2", "exception", ""]]
    drawn = "const g = document.getElementById('tree'); return g && g.data ? g.data[1].customdata : null"
    assert sorted(wait(browser, lambda d: js(d, drawn), what="the tree")) == [-1, 0, 1, 2]
    edges = js(browser, "return document.getElementById('tree').data[0].x.filter((x) => x !== null)")
    assert edges == [-1, 0, -1, 0]  # each child drawn from its seeded parent at step -1
    assert "2 seeded" in browser.find_element("id", "run-seeded").text
    assert "2/4 evaluations" in browser.find_element("id", "run-stats").text  # the proposals only
    assert "seeded" in [o.get_attribute("value") for o in browser.find_elements("css selector", "#cand-outcome option")]
    browser.find_element("css selector", "#cand-table tr[data-cid='-1']").click()
    title = "return (document.getElementById('cand-title') || {}).textContent"
    wait(browser, lambda d: js(d, title) == "Candidate #-1", what="the starting program's detail")
    detail = browser.find_element("id", "cand-detail").text
    assert "starting program /x/mine.py" in detail and "not proposed and not charged" in detail
    assert browser.find_element("id", "cand-outcome-pill").text == "seeded"


# ------------------------------------------------------------------ the mirrors of the live run
def test_the_live_run_was_mirrored_to_mlflow_and_tensorboard(live):
    """[log] mlflow/tensorboard in TINY: `coevolve run` mirrored at each step
    boundary; read back with MlflowClient and TensorBoard's EventAccumulator."""
    from test_trackers import mlflow_history, tensorboard_scalars

    assert live["run"].wait(timeout=600) == 0, live["run"].stdout.read()
    records = candidates(live)
    valid = [c["objective"] for c in records if c["objective"] is not None]
    client, run, history = mlflow_history(live["dir"])
    assert run.info.status == "FINISHED"
    assert [step for step, _ in history["valid_rate"]] == [c["id"] for c in records]
    assert history["valid_rate"][-1][1] == pytest.approx(len(valid) / len(records))
    assert history["best_so_far"][-1][1] == pytest.approx(min(valid))  # tsp: lower is better
    es = read_jsonl(live["dir"] / "history.jsonl")
    assert [v for _, v in history["es/sigma"]] == pytest.approx([abs(r["sigma"]) for r in es])
    assert [v for _, v in history["es/member_00/reward"]] == pytest.approx([r["rewards"][0] for r in es])
    artefacts = {f.path for f in client.list_artifacts(run.info.run_id)}
    assert {"best.py", "best_program.py", "summary.json"} <= artefacts
    best = Path(client.download_artifacts(run.info.run_id, "best.py", str(live["root"])))
    assert best.read_text() == (live["dir"] / "best.py").read_text()
    _, scalars = tensorboard_scalars(live["dir"] / "tensorboard")
    assert [s for s, _ in scalars["best_so_far"]] == [s for s, _ in history["best_so_far"]]
    assert [v for _, v in scalars["best_so_far"]] == pytest.approx([v for _, v in history["best_so_far"]])
    assert len(scalars["es/reward_mean"]) == len(es)


# ------------------------------------------------------------------ an agent run
AGENT_OVERRIDES = {
    "run": {"method": "esopt+trace2skill", "budget": 4}, "task": {"masked": 1},
    "agent": {"population": 2, "batch": 2, "eval_cases": 2, "distill": "online", "skill_every": 1,
              "skill_successes": 0},
    "sampling": {"max_tokens": 8}, "es": {"sigma": 1e-2, "sigma_end": 5e-3, "alpha": 2e-3},
    "log": {"mlflow": True, "tensorboard": True}}


def test_agent_page_shows_mean_pass_at_k_and_the_skill(browser, engine, tmp_path, monkeypatch):
    """One round of a tiny esopt+trace2skill run on the session engine (as
    tests/test_agents_run_cli.py runs them), then its page: the held-out
    Mean@k / Pass@k with their intervals per evaluation and the distilled
    skill's text; and its mirrors."""
    from coevolve.commands.run import create_store, execute_agent, load_run_config
    from coevolve.dashboard.reader import AgentRun
    from test_trackers import mlflow_history

    monkeypatch.chdir(ROOT)
    overrides = {**AGENT_OVERRIDES, "run": {**AGENT_OVERRIDES["run"], "out": str(tmp_path / "agent-run")}}
    # as `coevolve run` reads it: its [skills] paths count from the example's folder
    config = load_run_config(ROOT / "examples" / "sudoku_esopt.toml", overrides)
    try:
        execute_agent(config, create_store(config), engine=engine, progress=False)
    finally:
        engine.reset()
    run_dir = tmp_path / "agent-run"
    skill = [e for e in read_jsonl(run_dir / "events.jsonl") if e.get("type") == "skill"]
    assert skill, "the round distilled no skill"
    expected = {e["round"]: e["metrics"] for e in AgentRun(run_dir).detail()["evals"]}
    assert sorted(expected) == [0, 1] and all({"Mean@1", "Pass@1"} <= set(m) for m in expected.values())

    dashboard, url = start_dashboard(run_dir, refresh=0.5)
    try:
        browser.get(url + "#/agent/agent-run")
        traces = ("const g = document.getElementById('eval-chart');"
                  "return g && g.data ? g.data.map((t) => [t.name, t.x, t.y, t.error_y.array]) : null")
        shown = {name: (x, y, up) for name, x, y, up in wait(browser, lambda d: js(d, traces), what="the eval chart")}
        for metric in ("Mean@1", "Pass@1"):
            x, y, up = shown[metric]
            assert x == [0, 1]
            assert y == pytest.approx([expected[r][metric]["mean"] for r in (0, 1)])
            assert up == pytest.approx([expected[r][metric]["high"] - expected[r][metric]["mean"] for r in (0, 1)])
        text = wait(browser, lambda d: d.find_element("id", "skill-text").text, what="the skill text")
        assert text.strip() == clean(skill[-1]["text"]).strip()
        assert "round 1" in browser.find_element("id", "skill-version").text
        # the held-out change, recounted here from the two evaluations' episodes (one greedy attempt per problem)
        rewards = [{t["case_id"]: t["reward"] for t in read_jsonl(run_dir / "trajectories" / f"eval_{r:03d}.jsonl")}
                   for r in (0, 1)]
        better = sum(rewards[1][c] > rewards[0][c] for c in rewards[0])
        worse = sum(rewards[1][c] < rewards[0][c] for c in rewards[0])
        change = wait(browser, lambda d: js(d, "return (document.getElementById('agent-change') || {}).textContent"),
                      what="the held-out change")
        p = "0.5" if {better, worse} == {0, 2} else "1"  # two problems: both one way is 2 x 1/4, else 1
        assert change.split(": ", 1)[1] == f"{better} of 2 problems better, {worse} worse; cannot be told apart " \
                                           f"(sign test p = {p})"
        shoot(browser, {"root": tmp_path}, "dashboard-agent")
    finally:
        dashboard.terminate()
        dashboard.wait(timeout=30)

    _, run, history = mlflow_history(run_dir)
    assert run.info.status == "FINISHED"
    assert [s for s, _ in history["agent/mean_reward"]] == [4]  # one round, 4 episodes
    assert len(history["eval/mean_reward"]) == 2 and len(history["es/sigma"]) == 1
