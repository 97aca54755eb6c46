#!/bin/bash
# resume of a killed run (s_killed3: tsp_eoh killed after step 1) with one edit of its config.toml each
cd /tmp/ks/work
R="env PYTHONPATH=/tmp/ks/src /work/main/.venv/bin/python -m coevolve"
edit() {  # name, python snippet editing text t
  rm -rf e_$1 && cp -a s_killed3 e_$1
  python3 - e_$1/config.toml "$2" <<'PY'
import sys, re
p, code = sys.argv[1], sys.argv[2]
t = open(p).read(); exec(code); open(p, "w").write(t)
PY
  $R run --resume e_$1 --no-progress > e_$1.out 2> e_$1.err; rc=$?
  echo "== $1 rc=$rc :: $(grep -v '^$' e_$1.err | head -3 | cut -c1-400)"
}
edit timeout 't = t.replace("timeout_s = 300.0", "timeout_s = 100.0")'
edit retries 't = t.replace("retries = 0\ntimeout_s", "retries = 3\ntimeout_s")'
edit concurrency 't = t.replace("concurrency = 8", "concurrency = 2")'
edit caps_wall 't = re.sub(r"\[caps\]\n", "[caps]\nwall_s = 1000.0\n", t, count=1)'
edit base_url 't = t.replace("127.0.0.1:18901", "localhost:18901")'
edit sandbox_timeout 't = t.replace("timeout_s = 20.0", "timeout_s = 30.0")'
edit sandbox_workers 't = t.replace("workers = 0", "workers = 1")'
edit temperature 't = t.replace("temperature = 0.7", "temperature = 0.5")'
edit seed 't = re.sub(r"\nseed = 5", "\nseed = 6", t)'
edit budget_up 't = re.sub(r"budget = 24", "budget = 32", t)'
edit budget_down 't = re.sub(r"budget = 24", "budget = 16", t)'
edit method 't = t.replace("method = \"eoh\"", "method = \"sample\"")'
edit task 't = t.replace("task = \"tsp_construct\"", "task = \"kp_construct\"")'
edit log_prompts 't = t.replace("prompts = true", "prompts = false")'
edit run_out 't = re.sub(r"out = \"[^\"]*\"", "out = \"/tmp/elsewhere\"", t)'
edit unknown_key 't = t.replace("[eoh]\n", "[eoh]\nbogus = 1\n")'
edit broken_toml 't = t.replace("[eoh]\n", "[eoh\n")'
rm -rf e_deleted && cp -a s_killed3 e_deleted && rm e_deleted/config.toml && $R run --resume e_deleted --no-progress > e_deleted.out 2> e_deleted.err; echo "== deleted rc=$? :: $(head -3 e_deleted.err)"
edit api_key_env 't = t.replace("api_key_env = \"OPENAI_API_KEY\"", "api_key_env = \"MY_KEY\"")'
edit model_name 't = t.replace("model = \"stub\"", "model = \"stub2\"")'
edit dtype 't = t.replace("dtype = \"auto\"", "dtype = \"float32\"")'
edit comment_only 't = "# a comment I added\n" + t'
edit reorder 't = t.replace("budget = 24\nseed = 5", "seed = 5\nbudget = 24")'
edit caps_completion 't = re.sub(r"\[caps\]\n", "[caps]\ncompletion_tokens = 100\n", t, count=1)'
