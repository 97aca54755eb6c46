import subprocess, sys, time, random, tempfile, pathlib, os
root = os.environ.get("ROOT", "/work/main")
tmp = pathlib.Path(tempfile.mkdtemp())
sys.path.insert(0, root+"/tests")
from test_dashboard import make_run, candidate
make_run(tmp/"runs"/"a", [candidate(1,0,[],7.0)])
make_run(tmp/"runs"/"b", [candidate(1,0,[],7.0)])
hangs = 0
delays = [float(x) for x in sys.argv[2:]] or [0.0]
for i in range(int(sys.argv[1])):
    d = random.uniform(0, float(os.environ.get('MAXD','0.05'))) if not sys.argv[2:] else delays[i % len(delays)]
    p = subprocess.Popen(["/work/main/.venv/bin/python", "-m", "coevolve.cli", "dashboard", str(tmp/"runs"), "--port", "0"],
                         cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = p.stdout.readline()
    if d: time.sleep(d)
    p.terminate()
    try:
        rc = p.wait(timeout=15)
        out = p.stdout.read()
        print(i, round(d,4), "rc", rc, repr(out[-120:]) if rc!=130 or out!="interrupted\n" else "", flush=True)
    except subprocess.TimeoutExpired:
        hangs += 1
        print(i, d, "HANG", flush=True)
        spy = os.environ.get("PYSPY")  # a py-spy binary: where the process waits
        os.system(f"{spy} dump --pid {p.pid} 2>&1 | head -60" if spy else
                  f"cat /proc/{p.pid}/status | grep -i state; ls /proc/{p.pid}/task | wc -l")
        p.kill(); p.wait()
print("hangs", hangs)
