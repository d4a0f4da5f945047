"""PyTorch workloads of FIELD-NOTES section 10's latency rows, bare (used by
h100_calibration.py on a real GPU).

    h100_rows.py kernels                 one kernel's time of each matmul shape (ms, CUDA events)
    h100_rows.py neighbour N SYNC_EVERY  fp16 NxN matmuls forever, synchronising every SYNC_EVERY (0: never)
    h100_rows.py bursts COUNT [JITTER_MS]  COUNT bursts of 8 fp16 4096 matmuls, 10 ms think (+20 warm-up);
                                         think drawn from 10 +- JITTER_MS when given (breaks phase locking
                                         between the bursts and the neighbour's time slices)
"""
import json
import random
import sys
import time

import torch


def matrices(n):
    return (torch.randn(n, n, device="cuda", dtype=torch.float16), torch.randn(n, n, device="cuda", dtype=torch.float16))


def main():
    mode = sys.argv[1]
    if mode == "kernels":
        result = {}
        for n in (4096, 8192):
            a, b = matrices(n)
            for _ in range(10):
                a @ b
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(50):
                a @ b
            end.record()
            torch.cuda.synchronize()
            result[f"fp16_{n}"] = start.elapsed_time(end) / 50
        print(json.dumps(result))
    elif mode == "neighbour":
        n, sync_every = int(sys.argv[2]), int(sys.argv[3])
        a, b = matrices(n)
        for _ in range(5):
            a @ b
        torch.cuda.synchronize()
        print("ready", flush=True)
        while True:
            for _ in range(sync_every or 64):
                a @ b
            if sync_every:
                torch.cuda.synchronize()
    elif mode == "bursts":
        count = int(sys.argv[2])
        jitter = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
        a, b = matrices(4096)
        latencies = []
        for i in range(count + 20):
            t0 = time.perf_counter()
            for _ in range(8):
                a @ b
            torch.cuda.synchronize()
            if i >= 20:
                latencies.append((time.perf_counter() - t0) * 1e3)
            time.sleep((10.0 + random.uniform(-jitter, jitter)) / 1e3)
        print(json.dumps({"latencies_ms": latencies}))


if __name__ == "__main__":
    main()
