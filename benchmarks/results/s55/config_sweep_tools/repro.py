"""Minimal reproducers of the findings, each run as a real `python -m coevolve` subprocess in a fresh
folder (--plan unless noted); the verbatim output goes to /tmp/sweep_tools/repro/results.json."""
import json, os, subprocess, shutil
from pathlib import Path
R = Path("/tmp/sweep_tools/repro")
HEUR = '[run]\nmethod = "sample"\ntask = "tsp_construct"\nbudget = 40\n'
CASES = {
 "B1_temperature_7": ("run", HEUR + '\n[sampling]\ntemperature = 7     # meant 0.7\n'),
 "B1_agent_eval_temperature": ("run", '[run]\nmethod = "esopt"\ntask = "sudoku"\nbudget = 64\n\n[agent]\npopulation = 4\nbatch = 4\neval_temperature = 7\n'),
 "B2_stop_empty": ("run", HEUR + '\n[sampling]\nstop = [""]\n'),
 "B3_sigma_typo": ("run", '[run]\nmethod = "sample+esopt"\ntask = "tsp_construct"\nbudget = 40\n\n[es]\nsigma = 1e3     # meant 1e-3\nalpha = 5e4     # meant 5e-4\n'),
 "B4_sandbox_timeout": ("run", HEUR + '\n[sandbox]\ntimeout_s = 1e10   # "no limit"\n'),
 "B5_endpoint_timeout": ("run", HEUR + '\n[endpoint]\nbase_url = "http://127.0.0.1:18931/v1"\nmodel = "stub"\ntimeout_s = 1e10\n'),
 "B6_memory_mb": ("run", HEUR + '\n[sandbox]\nmemory_mb = 9223372036854775807\n'),
 "B7_agent_taskk": ("run", '[run]\nmethod = "esopt"\ntaskk = "react_math"\nbudget = 128\n\n[task]\nturns = 4\n\n[agent]\npopulation = 8\nbatch = 4\n'),
 "B7_agent_no_run_task": ("run", '[run]\nmethod = "esopt"\nbudget = 128\n\n[agent]\npopulation = 8\nbatch = 4\n'),
 "B7_agent_task_namee": ("run", '[run]\nmethod = "esopt"\nbudget = 64\n\n[task]\nnamee = "sudoku"\nmasked = 1\n\n[agent]\npopulation = 4\nbatch = 4\n'),
 "B8_compare_budget_max": ("compare", '[compare]\nmethods = ["sample"]\ntasks = ["tsp_construct"]\nbudgets = [10000000]\nseeds = [0]\n'),
 "B8_compare_default_methods": ("compare", '[compare]\ntasks = ["tsp_construct"]\nbudgets = [40]\nseeds = [0]\n'),
 "B9_run_agent_compare_base_only": ("run", '[compare]\nkind = "agent"\nmethods = ["base"]\ntasks = ["sudoku"]\nbudgets = [128]\nseeds = [0]\n'),
 "B10_workers_huge": ("run", HEUR + '\n[sandbox]\nworkers = 1000000000000000000\n'),
 "B11_m_multiplier": ("run", '[run]\nmethod = "eoh"\ntask = "tsp_construct"\nbudget = 40\n\n[eoh]\nm_multiplier = 1e308\n'),
 "B12_ray_no_host_run": ("run", HEUR + '\n[distributed]\naddress = "ray://"\n'),
 "B12_ray_bad_port_compare": ("compare", '[compare]\nmethods = ["sample"]\ntasks = ["tsp_construct"]\nbudgets = [40]\nseeds = [0]\n\n[distributed]\naddress = "ray://127.0.0.1:99999"\n'),
 "B13_eval_max_tokens": ("compare", '[compare]\nkind = "agent"\nmethods = ["base", "esopt"]\ntasks = ["sudoku"]\nbudgets = [64]\nseeds = [0]\n\n[eval]\nmax_tokens = 100000\n\n[agent]\npopulation = 4\nbatch = 4\n'),
 "B14_population_huge": ("run", '[run]\nmethod = "eoh+trace2skill"\ntask = "tsp_construct"\nbudget = 400\n\n[eoh]\npopulation = 1000000\n'),
 "B14_population_huge_no_skill": ("run", '[run]\nmethod = "eoh"\ntask = "tsp_construct"\nbudget = 400\n\n[eoh]\noffspring = 1000000\n'),
 "W1_run_plan_compare_task": ("run", '[compare]\nmethods = ["sample"]\ntasks = ["tsp_constuct"]\nbudgets = [40]\nseeds = [0]\n'),
 "W2_agent_compare_kind_typo": ("compare", '[compare]\nkindd = "agent"\nmethods = ["base", "esopt"]\ntasks = ["sudoku"]\n\n[eval]\nk = 4\n'),
 "W2_agent_compare_scalar": ("compare", 'compare = "agent"\n\n[eval]\nk = 4\n'),
 "W4_module_task": ("run", '[run]\nmethod = "sample"\ntask = "nosuchpkg.mod:Cls"\n'),
 "W4_compare_method_file": ("compare", '[compare]\nmethods = ["nomethod.py"]\ntasks = ["tsp_construct"]\nbudgets = [40]\nseeds = [0]\n'),
 "W5_problems_file_int": ("run", '[run]\nmethod = "esopt"\ntask = "react_math"\nbudget = 64\n\n[task]\nproblems_file = 5\n\n[agent]\npopulation = 4\nbatch = 4\n'),
 "W6_bom": ("run", "\ufeff" + HEUR),
 "W7_task_array": ("run", '[run]\nmethod = "esopt"\nbudget = 64\n\n[[task]]\nname = "sudoku"\n'),
 "W10_run_config_to_compare": ("compare", HEUR),
 "W13_wrong_section_hint": ("run", HEUR + '\n[es]\ntemperature = 0.5\n'),
 "W14_case_hint": ("run", '[run]\nmethod = "sample"\ntask = "TSP_construct"\n'),
 "W15_api_key_pasted": ("run", HEUR + '\n[endpoint]\nbase_url = "http://127.0.0.1:18931/v1"\nmodel = "stub"\napi_key_env = "sk-proj-abc123SECRET"\n'),
}
REAL = {"B4_sandbox_timeout": ["--out", "run"], "B5_endpoint_timeout": ["--out", "run"], "B6_memory_mb": ["--out", "run"],
        "W15_api_key_pasted": ["--out", "run"]}
STUBBED = {"B4_sandbox_timeout", "B6_memory_mb"}  # real run through the stub endpoint: no engine
out = {}
for name, (cmd, text) in CASES.items():
    d = R / name
    shutil.rmtree(d, ignore_errors=True); d.mkdir(parents=True)
    if name in STUBBED:
        text += '\n[endpoint]\nbase_url = "http://127.0.0.1:18931/v1"\nmodel = "stub"\n'
        text = text.replace('budget = 40', 'budget = 4') + '\n[sample]\nbatch = 2\npopulation = 2\n' if "[sample]" not in text else text
    (d / "c.toml").write_text(text, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": "/tmp/sweep", "OPENAI_API_KEY": "dummy"}
    results = []
    plans = [["--plan"]] + ([REAL[name]] if name in REAL else [])
    for extra in plans:
        argv = ["/work/main/.venv/bin/python", "-m", "coevolve", cmd, "c.toml", *extra] + (["--no-progress"] if "--plan" not in extra else [])
        if "--plan" not in extra:
            argv = ["flock", "/tmp/coevolve-engine.lock", "timeout", "120"] + argv
        p = subprocess.run(argv, cwd=d, capture_output=True, text=True, env=env)
        written = sorted(str(x.relative_to(d)) for x in d.rglob("*") if x.name != "c.toml")
        results.append({"argv": " ".join(a for a in argv if not a.startswith("/work")).replace("-m coevolve", "coevolve"),
                        "rc": p.returncode, "stdout": p.stdout[-1500:], "stderr": p.stderr[-1500:], "written": written[:10]})
    out[name] = {"cmd": cmd, "toml": text, "results": results}
    print("==", name, [(x["rc"], x["stderr"].strip().splitlines()[-1][:200] if x["stderr"].strip() else "(no stderr)") for x in results])
json.dump(out, open(R / "results.json", "w"), indent=1)
