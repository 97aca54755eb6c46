// coevolve dashboard page: polls the JSON API and draws with plotly.js.
// Every string that came from a run is inserted with textContent (the `el`
// helper below), never as HTML: candidate programs, ideas and messages are
// hostile text.
"use strict";

const S = { refresh: 2000, timer: null, view: null, busy: false, again: false };
// a valid repeat (earlier code, its score reused) is valid as the run table counts it: a lighter green
const COLORS = { valid: "#1a9850", "valid repeat": "#91cf60", duplicate: "#999999", parse: "#d73027", timeout: "#fdae61", syntax: "#f46d43",
  exception: "#e34a33", invalid: "#fc8d59", bad_signature: "#b2182b", seeded: "#2c7fb8" };
const PAGE = 50;
// a seeded program ([context] seed_template, [start] programs) was scored, not proposed
const SEEDED = "seeded: scored before the first step, not proposed and not charged to the budget";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "data") for (const [k, v] of Object.entries(value)) node.dataset[k] = String(v);
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

async function getJSON(url) {
  const response = await fetch(url, { cache: "no-store" });
  let body;
  try { body = await response.json(); } catch (e) { body = { error: response.statusText }; }
  // the status goes with the message: a 404 (an id no directory has) ends the page's polling
  if (!response.ok || body.error) throw Object.assign(new Error(body.error || response.statusText), { status: response.status });
  return body;
}

function fmt(x, digits = 5) {
  if (x === null || x === undefined) return "–";
  if (typeof x !== "number") return String(x);
  if (Number.isInteger(x)) return String(x);
  return Number(x.toPrecision(digits)).toString();
}
// "capped: patience" is styled as "capped"
const stateClass = (state) => String(state || "").split(":")[0];
const pct = (x) => (x === null || x === undefined ? "–" : (100 * x).toFixed(1) + "%");
const color = (outcome) => COLORS[outcome] || "#7b3294";
// evaluations against the budget T as the run table says them: what a run charges outside T (EoH's initial
// population with eoh.init_in_budget = false) apart, so 16 of T 12 does not read as overspent
const spent = (r) => `${fmt(r.used)}/${fmt(r.budget)}` + (r.outside_budget ? ` (+ ${fmt(r.outside_budget)} initial outside T)` : "");
// who holds a running run's or comparison's writer lock ("pid 1234 on HOST, since 03:41")
const writtenBy = (writer, id) => writer ? el("span", { class: "muted", id }, ` · written by ${writer}`) : "";

function status(text, error) {
  const node = document.getElementById("status");
  node.textContent = text;
  node.className = error ? "error" : "";
}

function main(...nodes) {
  const m = document.getElementById("main");
  m.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined));
}

function react(id, traces, layout) {
  const node = document.getElementById(id);
  if (!node || !window.Plotly) return;
  const base = { margin: { l: 55, r: 55, t: 30, b: 40 }, uirevision: id, legend: { orientation: "h", y: -0.2 } };
  Plotly.react(node, traces, Object.assign(base, layout), { displaylogo: false, responsive: true });
}

function table(id, headers, rows) {
  return el("div", { class: "scroll" }, el("table", { id }, el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))), el("tbody", {}, rows)));
}

// a table cell from the API (a CSV cell there): a number to five significant digits, a missing one empty
const cell = (value) => (value === null || value === undefined ? "" : fmt(value));
// a comparison's cell as report.md writes it where the API says (`shown`: a fraction as 23.33%), else `cell`
const shownCell = (row, key) => (row.shown && row.shown[key] !== undefined ? row.shown[key] : cell(row[key]));

// ------------------------------------------------------------------ routing
function parseHash() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  return { kind: parts[0] || "runs", id: parts[1], sub: parts[2], arg: parts[3] };
}

async function route() {
  const r = parseHash();
  if (S.view && S.view.kind === r.kind && S.view.id === r.id && S.view.onRoute) {
    S.view.onRoute(r);  // same page: only the selection changed
    return;
  }
  S.view = null;
  main(el("p", {}, "Loading…"));
  if (r.kind === "run") S.view = runView(r);
  else if (r.kind === "agent") S.view = agentView(r);
  else if (r.kind === "compare") S.view = compareView(r);
  else S.view = runsView();
  await tick();
  if (S.view && S.view.onRoute) S.view.onRoute(r);
}

// a link to an id no directory has here (moved, removed, or an older dashboard's): said on the page, not polled
function notFound(message) {
  S.view = null;
  main(el("h1", {}, "Not found"), el("p", { id: "not-found", class: "error" }, message),
    el("p", {}, el("a", { href: "#/" }, "all runs and comparisons")));
}

async function tick() {
  if (!S.view) return;
  if (S.busy) { S.again = true; return; }  // a new page waits for the poll in flight, not for the next interval
  S.busy = true;
  const view = S.view;
  try {
    await view.poll();
    if (view === S.view) status("updated " + new Date().toLocaleTimeString());
  } catch (e) {
    status(e.message, true);
    if (e.status === 404 && view === S.view) notFound(e.message);
  } finally {
    S.busy = false;
  }
  if (S.again) { S.again = false; await tick(); }
}

// ------------------------------------------------------------------ runs list
const KIND_PAGE = { run: "run", agent: "agent", comparison: "compare" };

function runsView() {
  const body = el("tbody", {});
  main(el("h1", {}, "Runs and comparisons"),
    el("section", { class: "card" }, el("table", { id: "runs-table" },
      el("thead", {}, el("tr", {}, ["directory", "kind", "task", "method", "seed", "progress", "best", "gap",
        "valid rate", "state", "caps"].map((h) => el("th", {}, h)))), body)));
  let drawn = null;
  return {
    kind: "runs",
    async poll() {
      const data = await getJSON("/api/runs");
      const seen = JSON.stringify(data);
      if (seen === drawn) return;  // rows are replaced only when something changed
      drawn = seen;
      body.replaceChildren(...data.runs.map((r) => {
        const total = (r.budget || 0) + (r.outside_budget || 0);
        const share = total ? Math.min(1, (r.used || 0) / total) : 0;
        const caps = Object.entries(r.caps || {}).filter(([, v]) => v !== null && v !== undefined)
          .map(([k, v]) => el("span", { class: "pill" }, `${k} ${v}`));
        return el("tr", { class: "click", data: { id: r.id, kind: r.kind },
          onclick: () => { location.hash = `#/${KIND_PAGE[r.kind]}/${encodeURIComponent(r.id)}`; } },
          el("td", { title: r.label }, r.parent ? "  ↳ " : "", r.name),
          el("td", {}, r.kind),
          el("td", {}, r.task || "–"), el("td", {}, r.method || "–"), el("td", {}, fmt(r.seed)),
          el("td", {}, el("span", { class: "bar" }, el("span", { style: `width:${(100 * share).toFixed(0)}%` })),
            ` ${spent(r)}`),
          el("td", { class: "best" }, fmt(r.best)), el("td", { title: r.reference_unavailable || null }, r.reference_unavailable ? "no reference" : pct(r.gap)), el("td", {}, pct(r.valid_rate)),
          el("td", { class: "state state-" + stateClass(r.state), title: r.error || (r.writer ? `written by ${r.writer}` : "") },
            r.state, r.error ? ": " + r.error : ""),
          el("td", {}, caps));
      }));
    },
  };
}

// ------------------------------------------------------------------ heuristic run
function runView(r) {
  const id = r.id;
  const api = `/api/run/${encodeURIComponent(id)}`;
  const st = { used: null, offset: 0, outcome: "", order: "id", treeMode: "auto", popStep: null, popFollow: true,
    selected: null, data: null };
  const stats = el("div", { id: "run-stats" });
  const outcomeSelect = el("select", { id: "cand-outcome", onchange: (e) => { st.outcome = e.target.value; st.offset = 0; loadPage(); } },
    el("option", { value: "" }, "all outcomes"));
  const orderSelect = el("select", { id: "cand-order", onchange: (e) => { st.order = e.target.value; st.offset = 0; loadPage(); } },
    el("option", { value: "id" }, "by evaluation"), el("option", { value: "rank" }, "best first"),
    el("option", { value: "newest" }, "newest first"));
  const pager = el("span", { class: "pager", id: "cand-pager" });
  const candBody = el("tbody", {});
  const detail = el("section", { class: "card", id: "cand-detail" }, el("p", { class: "muted" },
    "Click a candidate (table or tree) to see its code, idea, failure message, parents and diff."));
  const popSelect = el("select", { id: "pop-step", onchange: (e) => { st.popStep = Number(e.target.value); st.popFollow = false; loadPopulation(); } });
  const popBody = el("tbody", {});
  const esBody = el("tbody", {});
  const treeSelect = el("select", { id: "tree-mode", onchange: (e) => { st.treeMode = e.target.value; loadTree(); } },
    el("option", { value: "auto" }, "all (collapses when large)"), el("option", { value: "lineage" }, "best ten and their ancestors"),
    el("option", { value: "all" }, "all (latest 1000)"));
  const treeNote = el("span", { class: "muted", id: "tree-note" });
  // the skill the prompts showed (+trace2skill, skill.start): shown once the log holds a version
  const skillState = { chosen: null, seen: "" };
  const skillSelect = el("select", { id: "run-skill-version", onchange: (e) => { skillState.chosen = Number(e.target.value); drawSkillText(); } });
  const skillText = el("pre", { id: "run-skill-text", class: "wrap" });
  const skillShown = el("tbody", {});
  const skillTrials = el("ul", { id: "skill-trials" });
  const skillPanel = el("section", { class: "card", id: "skill-panel", hidden: "hidden" }, el("h2", {}, "Skill versions"),
    el("table", { id: "skill-table" }, el("thead", {}, el("tr", {}, ["prompt showed", "requests", "scored", "beat every parent"].map((h) => el("th", {}, h)))), skillShown),
    skillTrials, el("div", { class: "controls" }, "version ", skillSelect), skillText);
  let skillVersions = [];
  // the end-of-run table, once summary.json exists: open, since a finished run is read from it first
  const runTableBody = el("tbody", {});
  const runTablePanel = el("section", { class: "card", id: "run-table-panel", hidden: "hidden" },
    el("details", { id: "run-table-box", open: "open" },
      el("summary", {}, el("h2", {}, "Run table (as ", el("code", {}, "coevolve run"), " printed it)")),
      el("table", { id: "run-table" }, runTableBody)));
  let drawnTable = null;
  // the archive of islands, MAP-Elites and Pareto runs (their newest population/gen_NNNN.json): the API
  // sends none for other methods, and the panel stays hidden
  const archiveTitle = el("h2", { id: "archive-title" }, "Archive");
  const archiveNote = el("p", { id: "archive-note", class: "muted" });
  const archiveBody = el("div", { id: "archive-body" });
  const archivePanel = el("section", { class: "card", id: "archive-panel", hidden: "hidden" }, archiveTitle, archiveNote, archiveBody);
  let drawnArchive = null;

  main(
    el("h1", { id: "run-title" }, id), stats, runTablePanel,
    el("div", { class: "grid" },
      el("section", { class: "card" }, el("h2", {}, "Best so far and valid rate"), el("div", { id: "best-chart", class: "chart" })),
      el("section", { class: "card" }, el("h2", {}, "Outcomes per step"), el("div", { id: "outcome-step-chart", class: "chart" })),
      el("section", { class: "card" }, el("h2", {}, "Outcomes per operator"), el("div", { id: "outcome-op-chart", class: "chart" }))),
    el("section", { class: "card" }, el("h2", {}, "Genealogy"),
      el("div", { class: "controls" }, treeSelect, treeNote,
        el("span", { class: "muted" }, " colour = outcome, size = rank (bigger is better); click a node")),
      el("div", { id: "tree", class: "tree" })),
    el("div", { class: "detail" },
      el("section", { class: "card" }, el("h2", {}, "Candidates"),
        el("div", { class: "controls" }, outcomeSelect, orderSelect, pager,
          el("button", { id: "best-button", onclick: () => st.data && st.data.best_id != null && select(st.data.best_id) }, "best")),
        el("div", { class: "scroll" }, el("table", { id: "cand-table" }, el("thead", {}, el("tr", {},
          ["id", "step", "operator", "outcome", "objective", "rank", "parents", "idea"].map((h) => el("th", {}, h)))), candBody))),
      detail),
    el("section", { class: "card" }, el("h2", {}, "Population after each step"),
      el("div", { class: "controls" }, "step ", popSelect, el("span", { id: "pop-note", class: "muted" })),
      el("table", { id: "pop-table" }, el("thead", {}, el("tr", {}, ["rank", "id", "objective", "operator", "idea"].map((h) => el("th", {}, h)))), popBody)),
    archivePanel,
    skillPanel,
    el("section", { class: "card", id: "es-panel" }, el("h2", {}, "ES generations (history.jsonl)"),
      el("div", { id: "es-chart", class: "chart" }),
      el("table", { id: "es-table" }, el("thead", {}, el("tr", {}, ["generation", "step", "σ", "α", "member rewards",
        "z-scores", "all equal", "weights checksum"].map((h) => el("th", {}, h)))), esBody)));

  function select(cid) { location.hash = `#/run/${encodeURIComponent(id)}/c/${cid}`; }

  function drawCurves(d) {
    const c = d.curves;
    react("best-chart", [
      { x: c.x, y: c.best, name: "best so far", mode: c.x.length > 500 ? "lines" : "lines+markers", line: { shape: "hv" }, connectgaps: false },
      { x: c.x, y: c.valid_rate, name: "valid rate", yaxis: "y2", mode: "lines", line: { dash: "dot" } },
    ], { xaxis: { title: "evaluations", range: [0, Math.max(c.budget, c.x.length) + 1] },
      yaxis: { title: `objective (${c.direction === "min" ? "lower" : "higher"} is better)` },
      yaxis2: { overlaying: "y", side: "right", range: [0, 1], tickformat: ".0%", title: "valid rate" } });
    react("outcome-step-chart", Object.entries(c.outcomes_by_step).map(([k, v]) => (
      { type: "bar", name: k, x: c.steps, y: v, marker: { color: color(k) } })),
    { barmode: "stack", xaxis: { title: "step" }, yaxis: { title: "candidates" } });
    react("outcome-op-chart", Object.entries(c.outcomes_by_operator).map(([k, v]) => (
      { type: "bar", name: k, x: c.operators, y: v, marker: { color: color(k) } })),
    { barmode: "stack", xaxis: { title: "operator" }, yaxis: { title: "candidates" } });
    const known = new Set([...outcomeSelect.options].map((o) => o.value));
    for (const k of Object.keys(c.outcomes_by_step)) if (!known.has(k)) outcomeSelect.append(el("option", { value: k }, k));
  }

  let drawnES = null;
  function drawES(es, uses, method) {
    const seen = JSON.stringify(es);
    if (seen === drawnES) return;  // unchanged: keep the table's rows (and the reader's place)
    drawnES = seen;
    const gens = es.generations;
    if (!gens.length) {
      esBody.replaceChildren(el("tr", {}, el("td", { colspan: 8, class: "muted" }, uses ? "no ES generation in history.jsonl (yet)"
        : `${method} runs no ES generations: the weights stay as loaded`)));
      react("es-chart", [], { annotations: [{ text: uses ? "no ES generations yet" : `no ES in ${method}`, showarrow: false }] });
      return;
    }
    const xs = [], ys = [];
    for (const g of gens) for (const r of g.rewards) { xs.push(g.generation); ys.push(r); }
    react("es-chart", [
      { x: xs, y: ys, mode: "markers", name: "member reward", marker: { size: 7, opacity: 0.7 } },
      { x: gens.map((g) => g.generation), y: gens.map((g) => g.sigma), name: "σ", yaxis: "y2", mode: "lines+markers" },
    ], { xaxis: { title: "generation", dtick: 1 }, yaxis: { title: "reward" }, yaxis2: { overlaying: "y", side: "right", title: "σ" } });
    esBody.replaceChildren(...gens.map((g) => el("tr", { data: { generation: g.generation } },
      el("td", {}, fmt(g.generation)), el("td", {}, fmt(g.step)), el("td", {}, fmt(g.sigma)), el("td", {}, fmt(g.alpha)),
      el("td", {}, g.rewards.map((x) => fmt(x, 3)).join(", ")), el("td", {}, g.z.map((x) => fmt(x, 3)).join(", ")),
      el("td", { class: g.all_equal ? "error" : "" }, g.all_equal ? "yes: no signal, no update" : "no"),
      el("td", { title: g.checksum }, (g.checksum || "").slice(0, 12)))));
  }

  function drawTable(rows) {
    const seen = JSON.stringify(rows);
    if (seen === drawnTable) return;  // unchanged: a selection in the table survives the poll
    drawnTable = seen;
    runTablePanel.hidden = !rows || !rows.length;
    runTableBody.replaceChildren(...(rows || []).map(([name, value]) => el("tr", {},
      el("td", { class: "run-table-name" }, name), el("td", {}, value))));
  }

  const candLink = (cid) => el("a", { href: `#/run/${encodeURIComponent(id)}/c/${cid}` }, `#${cid}`);
  const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;

  function drawArchive(a) {
    const seen = JSON.stringify(a);
    if (seen === drawnArchive) return;  // unchanged: a hover or selection in it survives the poll
    drawnArchive = seen;
    archivePanel.hidden = !a;
    if (!a) return;
    archiveTitle.textContent = `Archive: ${a.title}`;
    archiveNote.className = a.error ? "error" : "muted";
    if (a.error) {  // a snapshot that cannot be read: the file and what is wrong, the rest of the page as ever
      archiveNote.textContent = `cannot show ${a.file}: ${a.error}`;
      archiveBody.replaceChildren();
      return;
    }
    if (a.step === null) {
      archiveNote.textContent = "no archive snapshot yet (one is written after every step)";
      archiveBody.replaceChildren();
      return;
    }
    archiveNote.textContent = `after step ${a.step}, ${fmt(a.evaluations)} evaluations (${a.file})`;
    const draw = { islands: drawIslands, grid: drawGrid, pareto: drawPareto }[a.kind];
    archiveBody.replaceChildren(...(draw ? draw(a) : []));
  }

  function drawIslands(a) {
    const rows = a.islands.map((i) => el("tr", { data: { island: i.island } },
      el("td", {}, i.island), el("td", {}, i.size), el("td", { class: "best" }, fmt(i.best)),
      el("td", {}, i.best_id === null ? "–" : candLink(i.best_id)),
      el("td", { title: i.reset_steps.length ? `emptied and refounded at step ${i.reset_steps.join(", ")}` : null }, fmt(i.resets))));
    return [el("p", { id: "archive-summary" }, `${plural(a.islands.length, "island", "islands")}, `,
      a.resets === null ? "resets not recorded" : `${plural(a.resets, "reset", "resets")} so far (each empties the worse half)`),
    table("archive-islands", ["island", "programs", "best objective", "best", "resets"], rows)];
  }

  function drawGrid(a) {
    const [across, down] = a.axes;  // columns: the first descriptor; rows: the second, if any
    const at = new Map(a.cells.map((c) => [`${c.x},${c.y}`, c]));
    const range = (axis, k) => `${fmt(axis.edges[k], 3)}–${fmt(axis.edges[k + 1], 3)}`;
    const bins = [...Array(a.bins).keys()];
    const rows = down ? bins.slice().reverse() : [0];  // higher values on top, as the report's heat map
    const cell = (c) => {
      if (!c) return el("td", { class: "empty" });
      const light = 92 - 56 * c.quality;  // better = darker
      const title = `#${c.id}: objective ${fmt(c.objective)}; ` + c.descriptors.map((v, i) => `${a.descriptors[i]} ${fmt(v)}`).join(", ")
        + (c.elites > 1 ? `; the best of ${c.elites} elites over ${a.hidden.join(", ")}` : "");
      return el("td", { class: "elite", title, data: { cid: c.id, quality: c.quality }, onclick: () => select(c.id),
        style: `background:hsl(220,65%,${light.toFixed(0)}%);color:${light < 60 ? "#fff" : "#1d2330"}` }, fmt(c.objective, 4));
    };
    const head = el("tr", {}, el("th", { class: "corner" }, down ? `${down.name} ↓  ${across.name} →` : `${across.name} →`),
      bins.map((k) => el("th", {}, range(across, k))));
    const body = rows.map((y) => el("tr", {}, el("th", {}, down ? range(down, y) : ""), bins.map((x) => cell(at.get(`${x},${y}`)))));
    const axis = (what, x) => `${what}: ${x.name}, ${fmt(x.low)} to ${fmt(x.high)} in ${a.bins} cells`;
    return [
      el("p", { id: "archive-summary" }, `${a.filled} of ${a.total} cells filled`,
        a.undescribed === null ? "" : ` · ${a.undescribed} undescribed (valid programs whose descriptors are not all finite, kept out of the grid)`),
      el("p", { class: "muted", id: "archive-axes" }, [axis("columns", across), down ? axis("rows", down) : null].filter(Boolean).join("; "),
        " (values outside a range go to its edge cell); colour: darker is better (", a.direction === "min" ? "lower" : "higher",
        " objective); click a cell for its elite",
        a.hidden.length ? `. A grid over ${a.descriptors.length} descriptors: shown over the first two, each cell the best elite over ${a.hidden.join(", ")}` : ""),
      el("div", { class: "scroll" }, el("table", { id: "archive-grid", class: "heat" }, el("thead", {}, head), el("tbody", {}, body)))];
  }

  function drawPareto(a) {
    const rows = a.front.map((w) => el("tr", { data: { cid: w.id } },
      el("td", {}, candLink(w.id)), el("td", {}, fmt(w.objective)),
      el("td", {}, el("span", { class: "bar" }, el("span", { style: `width:${a.instances ? (100 * w.wins / a.instances).toFixed(0) : 0}%` })),
        ` ${w.wins} of ${a.instances}`),
      el("td", {}, pct(w.share))));
    return [el("p", { id: "archive-summary" }, `${plural(a.front.length, "program", "programs")} on the front, each the best on some of the `,
      `${plural(a.instances, "training instance", "training instances")}`,
      a.unprofiled === null ? "" : ` · ${a.unprofiled} unprofiled (valid programs without per-instance objectives, kept out)`),
    table("archive-front", ["program", "objective", "instances won", "share of parent draws"], rows)];
  }

  function drawSkills(k) {
    const seen = JSON.stringify(k);
    if (!k || !k.versions.length || seen === skillState.seen) return;  // none yet, or unchanged
    skillState.seen = seen;
    skillPanel.hidden = false;
    skillVersions = k.versions;
    skillShown.replaceChildren(...k.shown.map((v) => el("tr", { data: { version: v.version === null ? "none" : v.version } },
      el("td", {}, v.label), el("td", {}, v.candidates), el("td", {}, v.valid), el("td", {}, v.improved))));
    skillTrials.replaceChildren(...k.trials.map((line) => el("li", {}, line)));
    if (skillSelect.options.length !== k.versions.length) {
      skillSelect.replaceChildren(...k.versions.map((v, i) => el("option", { value: i }, `${v.label}${v.step !== null ? ` (step ${v.step})` : " (skill.start)"}`)));
      skillState.chosen = k.versions.length - 1;
      skillSelect.value = String(skillState.chosen);
    }
    drawSkillText();
  }

  function drawSkillText() {
    const v = skillVersions[skillState.chosen] || skillVersions[skillVersions.length - 1];
    skillText.textContent = v ? v.text : "";
  }

  async function loadPage() {
    const q = new URLSearchParams({ offset: st.offset, limit: PAGE, order: st.order });
    if (st.outcome) q.set("outcome", st.outcome);
    const page = await getJSON(`${api}/candidates?${q}`);
    candBody.replaceChildren(...page.rows.map((c) => el("tr", {
      class: "click" + (c.id === st.selected ? " selected" : ""), data: { cid: c.id, outcome: c.outcome, rank: c.rank || "" },
      onclick: () => select(c.id) },
    el("td", {}, c.id), el("td", {}, c.step), el("td", {}, c.operator),
    el("td", { class: "outcome-" + c.outcome, title: c.outcome === "seeded" ? SEEDED : null }, c.outcome),
    el("td", {}, fmt(c.objective)), el("td", {}, fmt(c.rank)),
    el("td", {}, c.parents.join(", ")), el("td", { class: "muted idea", title: c.idea }, c.idea))));
    const last = Math.min(page.offset + PAGE, page.total);
    pager.replaceChildren(
      el("button", { disabled: page.offset === 0 ? "disabled" : null, onclick: () => { st.offset = Math.max(0, st.offset - PAGE); loadPage(); } }, "‹ prev"),
      `${page.total ? page.offset + 1 : 0}–${last} of ${page.total} `,
      el("button", { disabled: last >= page.total ? "disabled" : null, onclick: () => { st.offset += PAGE; loadPage(); } }, "next ›"));
  }

  async function loadTree() {
    const t = await getJSON(`${api}/tree?mode=${st.treeMode}`);
    // x = step, y = the candidate's place in its step (valid ones first, best on top)
    const byStep = new Map();
    for (const n of t.nodes) { if (!byStep.has(n.step)) byStep.set(n.step, []); byStep.get(n.step).push(n); }
    const pos = new Map();
    for (const [step, nodes] of byStep) {
      nodes.sort((a, b) => (a.rank || 1e12) - (b.rank || 1e12) || a.id - b.id);
      nodes.forEach((n, i) => pos.set(n.id, [step, -i]));
    }
    const ex = [], ey = [];
    for (const n of t.nodes) for (const p of n.parents) {
      if (!pos.has(p)) continue;
      ex.push(pos.get(p)[0], pos.get(n.id)[0], null); ey.push(pos.get(p)[1], pos.get(n.id)[1], null);
    }
    const ranked = t.nodes.filter((n) => n.rank).length || 1;
    const size = (n) => (n.rank ? 8 + 14 * (1 - (n.rank - 1) / ranked) : 6);
    react("tree", [
      { x: ex, y: ey, mode: "lines", type: "scatter", line: { color: "#c8ccd8", width: 1 }, hoverinfo: "skip", showlegend: false },
      { x: t.nodes.map((n) => pos.get(n.id)[0]), y: t.nodes.map((n) => pos.get(n.id)[1]), type: "scatter", mode: "markers",
        customdata: t.nodes.map((n) => n.id), showlegend: false,
        text: t.nodes.map((n) => `#${n.id} ${n.operator} ${n.outcome}${n.objective !== null ? " " + fmt(n.objective) : ""}${n.rank ? " rank " + n.rank : ""}`),
        hoverinfo: "text", marker: { color: t.nodes.map((n) => color(n.outcome)), size: t.nodes.map(size), line: { width: 0.5, color: "#333" } } },
    ], { xaxis: { title: "step", dtick: 1 }, yaxis: { visible: false }, hovermode: "closest" });
    const seeded = t.seeded ? `, ${t.seeded} seeded (step -1)` : "";
    treeNote.textContent = t.collapsed ? ` showing ${t.nodes.length} of ${t.total + t.seeded} (collapsed) ` : ` ${t.total} candidates${seeded} `;
    const node = document.getElementById("tree");
    if (node && !node.dataset.bound && node.on) {
      node.on("plotly_click", (ev) => { const p = ev.points.find((q) => q.customdata !== undefined); if (p) select(p.customdata); });
      node.dataset.bound = "1";
    }
  }

  async function loadPopulation() {
    const p = await getJSON(`${api}/population${st.popFollow ? "" : "?step=" + st.popStep}`);
    if (p.step === null) { popBody.replaceChildren(el("tr", {}, el("td", { colspan: 5, class: "muted" }, "no snapshot yet"))); return; }
    popSelect.replaceChildren(...p.steps.map((s) => el("option", { value: s, selected: s === p.step ? "selected" : null }, s)));
    document.getElementById("pop-note").textContent = ` after operator ${p.operator}, ${p.evaluations} evaluations`;
    if (!p.members.length) {
      popBody.replaceChildren(el("tr", {}, el("td", { colspan: 5, class: "muted" }, "no valid candidate in the population after this step")));
      return;
    }
    popBody.replaceChildren(...p.members.map((m, i) => el("tr", { class: "click", onclick: () => select(m.id) },
      el("td", {}, i + 1), el("td", {}, m.id), el("td", {}, fmt(m.objective)), el("td", {}, m.operator), el("td", { class: "muted idea", title: m.idea }, m.idea))));
  }

  async function showCandidate(cid) {
    st.selected = cid;
    for (const row of candBody.children) row.classList.toggle("selected", Number(row.dataset.cid) === cid);
    let c;
    try { c = await getJSON(`${api}/candidate/${cid}`); } catch (e) { detail.replaceChildren(el("p", { class: "error" }, e.message)); return; }
    const link = (x) => el("a", { href: `#/run/${encodeURIComponent(id)}/c/${x}` }, `#${x}`);
    const diffs = c.diffs.length ? c.diffs.map((d) => el("div", {},
      el("h3", {}, "diff against parent ", link(d.parent)),
      el("pre", { class: "diff", data: { parent: d.parent } }, d.lines.length ? d.lines.map((line) => el("span", {
        class: line.startsWith("@@") ? "hunk" : line.startsWith("+") && !line.startsWith("+++") ? "add"
          : line.startsWith("-") && !line.startsWith("---") ? "del" : "" }, line + "\n")) : "(same code as the parent)")))
      : [el("p", { class: "muted" }, c.parents.length ? "no parent with code"
        : c.outcome === "seeded" ? `no parent (${SEEDED})` : "no parent (initial population)")];
    detail.replaceChildren(...[
      el("h2", { id: "cand-title" }, `Candidate #${c.id}`),
      el("div", {}, el("span", { class: "pill" }, `step ${c.step}`), el("span", { class: "pill" }, c.operator),
        el("span", { class: "pill outcome-" + c.outcome, id: "cand-outcome-pill" }, c.outcome),
        el("span", { class: "pill" }, `objective ${fmt(c.objective)}`), c.rank ? el("span", { class: "pill" }, `rank ${c.rank}`) : null,
        c.reward !== null ? el("span", { class: "pill" }, `ES reward ${fmt(c.reward)}`) : null,
        c.skill_version !== null ? el("span", { class: "pill", id: "cand-skill" }, `skill v${String(c.skill_version).padStart(3, "0")}`) : null,
        el("span", { class: "pill" }, `model ${Object.entries(c.model_state).map(([k, v]) => `${k}=${v}`).join(" ")}`)),
      el("p", {}, "parents: ", c.parents.length ? c.parents.flatMap((p) => [link(p), " "]) : "none",
        " · children: ", c.children.length ? c.children.flatMap((p) => [link(p), " "]) : "none",
        c.duplicate_of !== null ? [" · duplicate of ", link(c.duplicate_of)] : null),
      c.failure ? el("div", {}, el("h3", {}, "failure: ", c.failure), el("pre", { id: "cand-message", class: "wrap" }, c.message || "(no message)")) : null,
      c.feedback ? el("div", {}, el("h3", {}, "the task's note"), el("pre", { id: "cand-feedback", class: "wrap" }, c.feedback)) : null,
      el("h3", {}, "idea"), el("pre", { id: "cand-idea", class: "wrap" }, c.idea || "(none)"),
      el("h3", {}, "code"), el("pre", { id: "cand-code" }, c.code === null ? "(no code could be extracted)" : c.code),
      // what the model wrote, blocks and prose included: open when no program came of it
      c.reply !== null ? el("details", { id: "cand-reply-box", open: c.code === null ? "open" : null },
        el("summary", {}, "the model's reply, as written"), el("pre", { id: "cand-reply", class: "wrap" }, c.reply)) : null,
      // what the model was sent ([log] prompts): the system prompt (skill included) and the request
      c.prompt ? el("details", { id: "cand-prompt-box" }, el("summary", {}, "the prompt it was sent"),
        c.prompt.map((m) => el("div", {}, el("h4", {}, m.role), el("pre", { class: "wrap cand-prompt" }, m.content)))) : null,
      el("div", { id: "cand-diff" }, diffs)].filter(Boolean));
  }

  return {
    kind: "run", id,
    async poll() {
      const d = await getJSON(api);
      st.data = d;
      document.getElementById("run-title").textContent = d.label;
      stats.replaceChildren(el("p", {},
        el("span", { class: "pill" }, d.task), el("span", { class: "pill" }, d.method), el("span", { class: "pill" }, `seed ${fmt(d.seed)}`),
        el("span", { class: "state state-" + stateClass(d.state), id: "run-state", title: d.writer ? `written by ${d.writer}` : null }, d.state),
        writtenBy(d.writer, "run-writer"), " · ", el("span", { id: "run-spent" }, `${spent(d)} evaluations`), " · best ",
        el("b", { id: "run-best" }, fmt(d.best)), d.best_id != null ? [" (", el("a", { href: `#/run/${encodeURIComponent(id)}/c/${d.best_id}` }, `#${d.best_id}`), ")"] : "",
        " · gap ", d.reference_unavailable ? el("span", { id: "run-no-reference", title: d.reference_unavailable }, "no reference") : pct(d.gap),
        ` · valid ${pct(d.valid_rate)}`,
        d.distinct_valid != null && d.distinct_valid < d.valid ?
          el("span", { id: "run-distinct" }, ` (${d.distinct_valid} distinct program${d.distinct_valid === 1 ? "" : "s"}, ${d.valid - d.distinct_valid} repeat${d.valid - d.distinct_valid === 1 ? "" : "s"})`) : "",
        d.seeded ? el("span", { id: "run-seeded", title: SEEDED }, ` · ${d.seeded} seeded`) : "",
        d.parent ? [" · part of ", el("a", { href: `#/compare/${encodeURIComponent(d.parent)}` }, d.parent)] : ""),
        d.failure_causes.length ? el("p", { id: "run-causes", class: "muted" }, "commonest failures: ",
          ...d.failure_causes.flatMap((f, i) => [i ? "; " : "", el("code", {}, f.cause), ` (${f.count})`])) : "");
      drawTable(d.table);
      drawCurves(d);
      drawES(d.es, d.uses_es, d.method);
      drawSkills(d.skills);
      drawArchive(d.archive);
      // the curves name the proposals' outcomes only: the seeded programs' filter is added here
      if (d.seeded && ![...outcomeSelect.options].some((o) => o.value === "seeded")) outcomeSelect.append(el("option", { value: "seeded" }, "seeded"));
      const moved = `${d.used} ${d.seeded}`;  // the seed events come before the first candidate
      if (moved !== st.used) {  // new candidates: the table, the tree and the archive move too
        st.used = moved;
        await Promise.all([loadPage(), loadTree(), loadPopulation()]);
      }
    },
    onRoute(route) {
      if (route.sub === "c" && route.arg !== undefined) showCandidate(Number(route.arg));
    },
  };
}

// ------------------------------------------------------------------ agent run
function agentView(r) {
  const id = r.id;
  const api = `/api/agent/${encodeURIComponent(id)}`;
  const st = { skill: null, file: null, offset: 0, rounds: null };
  const skillSelect = el("select", { id: "skill-version", onchange: (e) => { st.skill = Number(e.target.value); drawSkill(); } });
  const skillText = el("pre", { id: "skill-text", class: "wrap" });
  const fileSelect = el("select", { id: "episode-file", onchange: (e) => { st.file = e.target.value; st.offset = 0; loadEpisodes(); } });
  const episodes = el("div", { id: "episodes" });
  const stats = el("div", { id: "agent-stats" });
  let skills = [];
  main(el("h1", { id: "agent-title" }, id), stats,
    el("div", { class: "grid" },
      el("section", { class: "card" }, el("h2", {}, "Held-out evaluation per round (mean and interval)"), el("div", { id: "eval-chart", class: "chart" })),
      el("section", { class: "card" }, el("h2", {}, "Training rounds"), el("div", { id: "round-chart", class: "chart" }))),
    el("section", { class: "card" }, el("h2", {}, "Skill versions"), skillSelect, skillText),
    el("section", { class: "card" }, el("h2", {}, "Episodes"), fileSelect, episodes),
    el("section", { class: "card", id: "es-panel" }, el("h2", {}, "ES generations (history.jsonl)"), el("div", { id: "es-chart", class: "chart" })));

  function drawSkill() {
    const s = skills[st.skill] || skills[skills.length - 1];
    skillText.textContent = s ? s.text : "(no skill distilled yet)";
  }

  async function loadEpisodes() {
    if (!st.file) { episodes.replaceChildren(el("p", { class: "muted" }, "no trajectories yet")); return; }
    const page = await getJSON(`${api}/episodes/${encodeURIComponent(st.file)}?offset=${st.offset}&limit=20`);
    episodes.replaceChildren(
      el("div", { class: "pager" },
        el("button", { disabled: st.offset === 0 ? "disabled" : null, onclick: () => { st.offset = Math.max(0, st.offset - 20); loadEpisodes(); } }, "‹ prev"),
        `${page.total ? page.offset + 1 : 0}–${Math.min(page.offset + 20, page.total)} of ${page.total} `,
        el("button", { disabled: page.offset + 20 >= page.total ? "disabled" : null, onclick: () => { st.offset += 20; loadEpisodes(); } }, "next ›")),
      ...page.episodes.map((e) => el("details", { class: "episode" },
        el("summary", {}, `#${e.index} ${e.label} case ${e.case_id}: reward ${fmt(e.reward)}, ${e.turns} turns, ${e.finish}`),
        ...e.messages.map((m) => el("div", {}, el("b", {}, m.role), el("pre", { class: "wrap" }, m.content))))));
  }

  return {
    kind: "agent", id,
    async poll() {
      const d = await getJSON(api);
      document.getElementById("agent-title").textContent = d.label;
      const row = d.row;
      stats.replaceChildren(el("p", {}, el("span", { class: "pill" }, row.task), el("span", { class: "pill" }, row.method),
        el("span", { class: "pill" }, `seed ${fmt(row.seed)}`), el("span", { class: "state state-" + stateClass(row.state) }, row.state),
        writtenBy(row.writer, "agent-writer"),
        ` · ${row.used}/${row.budget} episodes · best held-out mean reward ${fmt(row.best)}`,
        d.change ? [" · held-out change ", el("span", { id: "agent-change" }, d.change)] : ""));
      const metrics = [...new Set(d.evals.flatMap((e) => Object.keys(e.metrics)))];
      react("eval-chart", metrics.map((m) => {
        const pts = d.evals.filter((e) => e.metrics[m]);
        return { name: m, x: pts.map((e) => e.round), y: pts.map((e) => e.metrics[m].mean), mode: "lines+markers",
          error_y: { type: "data", symmetric: false, visible: pts.some((e) => e.metrics[m].high !== null),
            array: pts.map((e) => (e.metrics[m].high === null ? 0 : e.metrics[m].high - e.metrics[m].mean)),
            arrayminus: pts.map((e) => (e.metrics[m].low === null ? 0 : e.metrics[m].mean - e.metrics[m].low)) } };
      }), { xaxis: { title: "round" } });
      react("round-chart", [
        { name: "mean reward", x: d.rounds.map((x) => x.round), y: d.rounds.map((x) => x.mean_reward), mode: "lines+markers" },
        { name: "solved rate", x: d.rounds.map((x) => x.round), y: d.rounds.map((x) => x.solved_rate), mode: "lines+markers" },
      ], { xaxis: { title: "round" } });
      const gens = d.es.generations;
      if (!gens.length) react("es-chart", [], { annotations: [{ text: row.uses_es ? "no ES generations yet" : `no ES in ${row.method}`, showarrow: false }] });
      else react("es-chart", [{ x: gens.flatMap((g) => g.rewards.map(() => g.generation)), y: gens.flatMap((g) => g.rewards),
        mode: "markers", name: "member fitness" }, { x: gens.map((g) => g.generation), y: gens.map((g) => g.sigma), yaxis: "y2", name: "σ" }],
      { xaxis: { title: "generation" }, yaxis2: { overlaying: "y", side: "right", title: "σ" } });
      skills = d.skills;
      if (skillSelect.options.length !== skills.length) {
        skillSelect.replaceChildren(...skills.map((s, i) => el("option", { value: i }, `${s.name} v${i + 1} (round ${fmt(s.round)}, ${s.mode})`)));
        st.skill = skills.length - 1;
        skillSelect.value = String(st.skill);
      }
      drawSkill();
      if (fileSelect.options.length !== d.episode_files.length) {
        fileSelect.replaceChildren(...d.episode_files.map((f) => el("option", { value: f }, f)));
        if (!st.file && d.episode_files.length) st.file = d.episode_files[0];
        fileSelect.value = st.file || "";
        await loadEpisodes();
      }
    },
  };
}

// ------------------------------------------------------------------ comparison
function compareView(r) {
  const id = r.id;
  let last = null;
  return {
    kind: "compare", id,
    async poll() {
      const d = await getJSON(`/api/compare/${encodeURIComponent(id)}`);
      const seen = JSON.stringify(d);
      if (seen === last) return;  // redraw only on a change: no flicker, scroll kept
      last = seen;
      const head = d.columns.filter((c) => !["why"].includes(c));
      const rows = d.rows.map((row) => el("tr", { class: row.kind === "delta" ? "delta" : "" },
        head.map((c) => el("td", { class: c === "verdict" ? (row.verdict === "cannot be told apart" ? "error verdict" : "verdict") : "",
          title: c === "verdict" ? row.why || "" : null }, shownCell(row, c)))));
      main(el("h1", {}, d.label),
        el("p", { id: "compare-state" }, el("span", { class: "state state-" + stateClass(d.state) }, d.state), writtenBy(d.writer)),
        // no report yet (running, interrupted) or one rendered before more runs finished: when it comes, and how
        d.note ? el("p", { class: "muted", id: "compare-note" }, d.note) : null,
        el("section", { class: "card" }, el("h2", {}, "Table"), table("compare-table", head, rows)),
        d.arms.length ? el("section", { class: "card" }, el("h2", {}, "Named arms"),
          el("ul", { id: "compare-arms" }, d.arms.map((a) => el("li", {}, a)))) : null,
        d.conclusions.length ? el("section", { class: "card" }, el("h2", {}, "What this comparison can and cannot conclude"),
          el("ul", {}, d.conclusions.map((c) => el("li", {}, c)))) : null,
        d.failures.length ? el("section", { class: "card" }, el("h2", {}, "Why candidates failed"),
          table("compare-failures", ["task", "method", "budget", "failed", "commonest causes"],
            d.failures.map((f) => el("tr", {}, el("td", {}, f.task), el("td", {}, f.method), el("td", {}, cell(f.budget)),
              el("td", {}, f.failed), el("td", {}, ...f.causes.flatMap((c, i) => [i ? "; " : "", el("code", {}, c.cause), ` (${cell(c.count)})`])))))) : null,
        el("section", { class: "card" }, el("h2", {}, "Plots"), d.plots.length ? d.plots.map((p) =>
          el("img", { class: "plot", alt: p, src: `/api/compare/${encodeURIComponent(id)}/plot/${encodeURIComponent(p)}` })) : el("p", { class: "muted" }, "no plots")),
        el("section", { class: "card" }, el("h2", {}, "Arm runs"), table("compare-runs", ["task", "method", "budget", "seed", "state", "test objective", "gap", "directory"],
          d.runs.map((x) => el("tr", {}, el("td", {}, x.task), el("td", {}, x.method), el("td", {}, cell(x.budget)), el("td", {}, cell(x.seed)),
            el("td", { class: "state-" + stateClass(x.state) }, x.state), el("td", {}, cell(x.objective)), el("td", {}, shownCell(x, "gap")),
            el("td", {}, x.id ? el("a", { href: `#/run/${encodeURIComponent(x.id)}` }, x.dir) : el("span", { class: "muted", title: "not on this machine" }, x.dir)))))));
    },
  };
}

// ------------------------------------------------------------------ start
window.addEventListener("hashchange", route);
(async () => {
  try {
    const config = await getJSON("/api/config");
    S.refresh = Math.max(250, 1000 * config.refresh);
  } catch (e) { status(e.message, true); }
  await route();
  S.timer = setInterval(tick, S.refresh);
})();
