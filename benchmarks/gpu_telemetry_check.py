"""GPU telemetry on a real GPU: sample NVML while a torch matmul loads the GPU, print it.

Run on a machine with an NVIDIA GPU, nvidia-ml-py and torch (CUDA)::

    python benchmarks/gpu_telemetry_check.py [--seconds 20] [--interval 0.2] [--gpu 0]

It prints the header line the plugin prints, one summary for an idle stretch and one for the
loaded stretch (clocks, power vs limit, temperature, memory, utilization, throttle reasons and
their share), the cost of one sample, and whether the loaded stretch would count as throttled.
Nothing is judged or written; it shows what ``launch/telemetry.py`` reads from this GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from pytest_llmperf.launch.telemetry import NvmlTelemetry, open_telemetry


def _stretch(tele: NvmlTelemetry, gpu: str, seconds: float, load: object | None) -> dict:
    sampler = tele.start([gpu])
    assert sampler is not None
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if load is None:
            time.sleep(0.05)
        else:
            load()  # type: ignore[operator]
    return sampler.stop().model_dump()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--interval", type=float, default=0.2)
    ap.add_argument("--gpu", default="0", help="NVML index")
    ap.add_argument("--size", type=int, default=8192, help="matmul side")
    args = ap.parse_args()
    tele = open_telemetry("nvml", "pynvml", args.interval)
    print(tele.header)
    if not isinstance(tele, NvmlTelemetry):
        return 1
    n = 200
    t0 = time.perf_counter()
    for _ in range(n):
        tele.read(args.gpu)
    print(f"one sample of one GPU: {(time.perf_counter() - t0) / n * 1e6:.0f} us")
    print("idle:", json.dumps(_stretch(tele, args.gpu, min(5.0, args.seconds), None), indent=1))

    import torch

    dev = torch.device(f"cuda:{args.gpu}")  # assumes CUDA_VISIBLE_DEVICES unset
    a = torch.randn(args.size, args.size, device=dev, dtype=torch.bfloat16)
    b = torch.randn(args.size, args.size, device=dev, dtype=torch.bfloat16)

    def load() -> None:
        for _ in range(10):
            torch.matmul(a, b)
        torch.cuda.synchronize(dev)

    loaded = _stretch(tele, args.gpu, args.seconds, load)
    print("loaded:", json.dumps(loaded, indent=1))
    from pytest_llmperf.base.gpu_stats import GpuTelemetry

    summary = GpuTelemetry.model_validate(loaded)
    hot = summary.throttled()
    print("throttled:", summary.throttle_text() if hot else "no")
    return 0


if __name__ == "__main__":
    sys.exit(main())
