"""PyTorch units of work for gslice.workloads_served (the real-GPU check and
the GPU tests): the workloads of FIELD-NOTES section 10, with plain,
long-standing torch APIs only.

- mm4096h: 4096x4096 fp16 matmul (~0.22 ms on an H100)
- mm8192h: 8192x8192 fp16 matmul (~1.8 ms)
- mm16384bf: 16384x16384 bf16 matmul (~12.5 ms)
- add: x.add_(1.0) on 1024 floats (launch-bound)

Memory: torch.empty chunks with whatever allocator PYTORCH_CUDA_ALLOC_CONF
chooses. Capture: torch.cuda.graph of matmul+relu in the given
capture_error_mode, warmed up on a side stream first, with no other thread
touching CUDA during the capture (valid CUDA usage)."""
from __future__ import annotations

import time

UNIT_SHAPES = {"mm4096h": (4096, "float16"), "mm8192h": (8192, "float16"), "mm16384bf": (16384, "bfloat16")}


class TorchBackend:
    name = "torch"

    def __init__(self):
        import torch
        self.torch = torch
        if not torch.cuda.is_available():
            raise RuntimeError(f"torch {torch.__version__} sees no CUDA device")
        self.device = torch.device("cuda")
        self.stream = torch.cuda.current_stream()
        self.x = torch.zeros(1024, device=self.device)
        self.mats: dict[str, tuple] = {}
        self.held: list = []
        self.graph = None
        self.graph_out = None
        self.launch_unit("mm4096h")  # cuBLAS handle, workspace, kernel choice
        self.launch_unit("add")
        self.sync()

    def _mats(self, unit: str):
        if unit not in self.mats:
            torch = self.torch
            n, dtype = UNIT_SHAPES[unit]
            dt = getattr(torch, dtype)
            a = torch.randn(n, n, device=self.device, dtype=dt) / n ** 0.5
            b = torch.randn(n, n, device=self.device, dtype=dt) / n ** 0.5
            self.mats[unit] = (a, b, torch.empty(n, n, device=self.device, dtype=dt))
        return self.mats[unit]

    def launch_unit(self, unit: str) -> None:
        if unit == "add":
            self.x.add_(1.0)
            return
        a, b, c = self._mats(unit)
        self.torch.matmul(a, b, out=c)

    def sync(self) -> None:
        self.torch.cuda.synchronize()

    def event(self):
        return self.torch.cuda.Event(enable_timing=True)

    def record(self, ev) -> None:
        ev.record()

    def elapsed_ms(self, start, end) -> float:
        return start.elapsed_time(end)

    def done(self, ev) -> bool:
        return ev.query()

    def allocate(self, nbytes: int) -> bool:
        torch = self.torch
        try:
            self.held.append(torch.empty(nbytes, dtype=torch.uint8, device=self.device))
        except torch.cuda.OutOfMemoryError:
            return False
        return True

    def free_all(self) -> None:
        self.held.clear()
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()

    def mem_get_info(self) -> tuple[int, int]:
        return self.torch.cuda.mem_get_info()

    def memory_reserved(self) -> int:
        return int(self.torch.cuda.memory_reserved())

    def capture(self, mode: str, kernels: int, sleep_every: int) -> dict:
        torch = self.torch
        x = torch.randn(1024, 1024, device=self.device)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the capture, as PyTorch asks
            for _ in range(3):
                y = x
                for _ in range(20):
                    y = torch.relu(y @ x) * 0.001
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode=mode):
            y = x
            for i in range(kernels):
                y = torch.relu(y @ x) * 0.001
                if sleep_every and i % sleep_every == sleep_every - 1:
                    time.sleep(0.01)  # the capture spans several of the shim's slices
        self.graph, self.graph_out = graph, y
        return {"nodes": kernels}

    def launch_on_own_stream_until(self, stop, unit: str) -> int:
        """In a thread of the caller's: launch `unit` on a stream of this
        thread's own, never synchronising, until `stop` is set; then wait for
        that stream alone. How many were launched."""
        torch = self.torch
        side = torch.cuda.Stream()
        n = 0
        with torch.cuda.stream(side):
            while not stop.is_set():
                self.launch_unit(unit)
                n += 1
        side.synchronize()
        return n

    def replay(self, count: int) -> dict:
        for _ in range(count):
            self.graph.replay()
        self.torch.cuda.synchronize()
        return {"finite": bool(self.torch.isfinite(self.graph_out).all())}
