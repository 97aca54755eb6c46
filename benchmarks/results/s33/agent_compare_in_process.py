"""s33: the tiny agent comparison of tests/test_agents_compare.py in process, under cProfile
(results: agent_prefix_cache.txt). /tmp/prof/agents.toml is the test's _tiny() config written out."""
import cProfile, pstats, io, sys, time
sys.path.insert(0, "tests")
from pathlib import Path
from coevolve.engine.vllm_engine import Engine
from coevolve.commands.compare import compare_and_report
from coevolve.plan import load_compare_config
import os
e = Engine(max_model_len=2048, max_num_seqs=64)
import shutil; shutil.rmtree("/tmp/prof/acin", ignore_errors=True)
t = time.time()
pr = cProfile.Profile(); pr.enable()
compare_and_report(load_compare_config(Path("/tmp/prof/agents.toml"), "/tmp/prof/acin"), Path("/tmp/prof/acin"), engine=e, log=print)
pr.disable()
print("compare", time.time() - t)
st = pstats.Stats(pr); st.sort_stats("cumulative"); s = io.StringIO(); st.stream = s; st.print_stats(45); print(s.getvalue()[:9000])
e.close()
