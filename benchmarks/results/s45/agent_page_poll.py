"""One look at an agent run's dashboard page (reader.AgentRun.detail, what the page polls), after the first
look parsed the files: the held-out change read through the dashboard's file cache (this stop) against
read again from disk on every look (before), side by side, interleaved, in one process.

A run of 20 held-out rounds, 123 cases x 4 attempts each, 12 turns of 300 characters per episode (about the
size of a sudoku evaluation's files). Usage: .venv/bin/python benchmarks/results/s45/agent_page_poll.py"""
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from coevolve.agents.rollout import Trajectory, save_trajectories  # noqa: E402
from coevolve.base.durable import append_jsonl  # noqa: E402
from coevolve.dashboard import reader  # noqa: E402
from coevolve.report import collecting  # noqa: E402

ROUNDS, CASES, K, TURNS = 20, 123, 4, 12


def write(path: Path) -> None:
    path.mkdir(parents=True)
    (path / "config.toml").write_text('[run]\nmethod = "esopt"\ntask = "sudoku"\nbudget = 640\nseed = 0\n'
                                      '[agent]\npopulation = 8\n')
    append_jsonl(path / "events.jsonl", {"type": "start", "kind": "agent", "version": 1})
    for r in range(ROUNDS):
        messages = [{"role": "system", "content": "rules " * 50}] + [
            {"role": role, "content": f"{role} {t} " + "x" * 300} for t in range(TURNS) for role in ("user", "assistant")]
        save_trajectories([Trajectory("sudoku", f"eval-{c}", messages, [], [""], reward=float((c + r + a) % 3 == 0),
                                      turns=TURNS, label="eval") for c in range(CASES) for a in range(K)],
                          path / "trajectories" / f"eval_{r:03d}", "Eval")
        append_jsonl(path / "events.jsonl", {"type": "eval", "round": r, "episodes_used": 32 * r, "mean_reward": 0.3})


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "agent"
        write(run)
        size = sum(f.stat().st_size for f in (run / "trajectories").glob("*.jsonl"))
        page = reader.AgentRun(run)
        page.detail()  # the first look parses every file
        cached, uncached = [], []
        original = collecting.heldout_change
        for _ in range(5):
            started = time.perf_counter()
            page.detail()
            cached.append(time.perf_counter() - started)
            # before: heldout_change read the first and last rounds' files from disk on every look
            reader.heldout_change = lambda d, a, b, read=None: original(d, a, b)
            started = time.perf_counter()
            page.detail()
            uncached.append(time.perf_counter() - started)
            reader.heldout_change = original
    a, b = statistics.median(uncached), statistics.median(cached)
    print(f"{ROUNDS} held-out rounds, {ROUNDS * CASES * K} episodes, {size / 1e6:.0f} MB of episode files")
    print(f"| one look | median s of 5 |\n|---|---|\n| before (change read from disk) | {a:.3f} |\n"
          f"| now (through the cache) | {b:.3f} |\nratio before/now: {a / b:.1f}")


if __name__ == "__main__":
    main()
