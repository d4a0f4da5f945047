"""Part B of h100_calibration.py with the think time drawn from 10 +- 3 ms:
    python h100_jitter.py OUT_DIR"""
import json
import subprocess
import sys
from pathlib import Path

ROWS = str(Path(__file__).resolve().parent / "h100_rows.py")
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
summary = {}
for name, count, neighbour in (("alone", 500, None), ("beside_4096_sync4", 800, ["4096", "4"]),
                               ("beside_4096_never", 500, ["4096", "0"]), ("beside_8192_sync4", 800, ["8192", "4"]),
                               ("beside_8192_never", 500, ["8192", "0"]), ("alone_again", 500, None)):
    n = None
    if neighbour:
        n = subprocess.Popen([sys.executable, ROWS, "neighbour", *neighbour], stdout=subprocess.PIPE, text=True)
        n.stdout.readline()
    b = subprocess.run([sys.executable, ROWS, "bursts", str(count), "3"], capture_output=True, text=True)
    if n:
        n.kill()
        n.wait()
    lat = sorted(json.loads(b.stdout.strip().splitlines()[-1])["latencies_ms"])
    (out / f"jitter-{name}.json").write_text(json.dumps(lat))
    summary[name] = {q: lat[min(len(lat) - 1, int(q * len(lat)))] for q in (0.01, 0.1, 0.5, 0.9, 0.99)}
    (out / "jitter.json").write_text(json.dumps(summary, indent=1))
print(json.dumps(summary))
