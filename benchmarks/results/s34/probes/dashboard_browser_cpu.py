import subprocess, sys, time, re, os, psutil
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
refresh = sys.argv[1]
d = subprocess.Popen([sys.executable, "-m", "coevolve.cli", "dashboard", "/tmp/dash_run", "--port", "0", "--refresh", refresh],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
url = re.search(r"http://\S+/", d.stdout.readline()).group(0)
o = Options(); o.binary_location = "/usr/bin/chromium"
for f in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,1800"):
    o.add_argument(f)
drv = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)
drv.get(url + "#/run/dash_run"); time.sleep(5)
def cpu():
    tot = {}
    for p in psutil.process_iter(["name", "cpu_times", "cmdline"]):
        try:
            n = "chromium" if "chrom" in (p.info["name"] or "") else ("dashboard" if p.pid == d.pid else None)
            if n: tot[n] = tot.get(n, 0) + sum(p.info["cpu_times"][:2])
        except Exception: pass
    return tot
a = cpu(); time.sleep(30); b = cpu()
print("refresh", refresh, {k: round((b[k] - a.get(k, 0)) / 30, 3) for k in b}, "cores busy")
drv.quit(); d.terminate()
