"""Crash injector for kill/resume tests (only when KS_CRASH is set).
KS_CRASH forms:
  events_after:N    SIGKILL right after the N-th complete append to events.jsonl (this process)
  events_torn:N     on the N-th append to events.jsonl write only half of the line, fsync, then SIGKILL
  cand_after:N      SIGKILL right after the N-th append to candidates.jsonl
  write:NAME:before|after:N   SIGKILL before/after the N-th atomic write of a file whose name starts with NAME
  history_after:N   SIGKILL after the N-th append to history.jsonl
"""
import os, signal

spec = os.environ.get("KS_CRASH")
if spec:
    import coevolve.base.durable as d
    parts = spec.split(":")
    counts = {}

    def die(why):
        try:
            with open("/tmp/ks/crash.log", "a") as f:
                f.write(f"{os.getpid()} {spec} {why}\n")
        finally:
            os.kill(os.getpid(), signal.SIGKILL)

    def bump(key):
        counts[key] = counts.get(key, 0) + 1
        return counts[key]

    orig_append = d.JsonlWriter.append

    def append(self, record):
        name = self.path.name
        kind = parts[0]
        if kind == "events_torn" and name == "events.jsonl" and bump("ev") == int(parts[1]):
            data = d._encode(record)
            os.write(self._fd, data[: len(data) // 2])
            os.fsync(self._fd)
            die("torn")
        orig_append(self, record)
        if kind == "events_after" and name == "events.jsonl" and bump("ev") == int(parts[1]):
            die("after events append")
        if kind == "cand_after" and name == "candidates.jsonl" and bump("c") == int(parts[1]):
            die("after cand append")
        if kind == "history_after" and name == "history.jsonl" and bump("h") == int(parts[1]):
            die("after history append")

    d.JsonlWriter.append = append
    if parts[0] == "write":
        prefix, when, n = parts[1], parts[2], int(parts[3])
        orig_bytes = d.atomic_write_bytes

        def atomic_write_bytes(path, data):
            hit = os.path.basename(str(path)).startswith(prefix) and bump("w") == n
            if hit and when == "before":
                die(f"before write {path}")
            orig_bytes(path, data)
            if hit and when == "after":
                die(f"after write {path}")
        d.atomic_write_bytes = atomic_write_bytes
    if parts[0] == "sleep":  # sleep:NAME:SECONDS: a slow writer, before its first atomic write of NAME*
        import time as _t
        prefix, secs = parts[1], float(parts[2])
        orig_b2 = d.atomic_write_bytes
        slept = []

        def atomic_write_bytes(path, data):
            if not slept and os.path.basename(str(path)).startswith(prefix):
                slept.append(1)
                _t.sleep(secs)
            orig_b2(path, data)
        d.atomic_write_bytes = atomic_write_bytes
