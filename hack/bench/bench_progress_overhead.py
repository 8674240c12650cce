"""What progress reporting costs a training loop: steps per second of a small model with no
report, with the helper as shipped before (`float()` of each value and one line per call: on a
GPU a device synchronisation at every call) and with `torchrun_progress` now (the tensor kept,
converted by the helper's writer thread), every step and every tenth, in one run, with ratios
against no report. Needs torch; runs on a CUDA device when there is one (the device machine),
else on the CPU (`--device cpu` forces it). Never part of CI:

    python3 hack/bench/bench_progress_overhead.py [--steps 3000] [--repeats 3] [--device cpu]

Each variant runs `--repeats` times, interleaved with the others (so drift in clocks or
temperature hits all alike); the table shows each one's median steps/s and the spread (min–max)
of its ratio to the no-report run of the same round. On shared CPU cores the spread is the
noise floor: a difference inside it is no difference.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

HELPER = Path(__file__).resolve().parents[2] / "controller" / "tools" / "python" / "torchrun_progress.py"


def load_helper() -> Any:
    spec = importlib.util.spec_from_file_location("torchrun_progress", HELPER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def report_before(path: str, **values: Any) -> None:
    """The helper's behaviour before this change, as it shipped: each value converted with
    float() (a CUDA tensor waits for the device) and one line appended per call."""
    record = {k: float(v) for k, v in values.items()}
    record = {k: v for k, v in record.items() if math.isfinite(v)}
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())
    finally:
        os.close(fd)


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def model_and_step(width: int, batch: int, device: str) -> Callable[[], torch.Tensor]:
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, width), torch.nn.GELU(),
        torch.nn.Linear(width, 1),
    ).to(device)  # fmt: skip
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    x = torch.randn(batch, width, device=device)
    y = torch.randn(batch, 1, device=device)

    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def run(
    variant: str, steps: int, step: Callable[[], torch.Tensor], helper: Any, path: str, device: str
) -> float:
    for _ in range(50):  # warm-up
        step()
    synchronize(device)
    started = time.perf_counter()
    for i in range(1, steps + 1):
        loss = step()
        if variant == "before, every step" or (variant == "before, every 10th" and i % 10 == 0):
            report_before(path, step=i, loss=loss)
        elif variant == "now, every step" or (variant == "now, every 10th" and i % 10 == 0):
            helper.report(step=i, loss=loss)
    synchronize(device)
    return steps / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None)
    args = parser.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here: run with --device cpu")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "progress.jsonl")
        os.environ["TORCHRUN_PROGRESS_FILE"], os.environ["RANK"] = path, "0"
        helper = load_helper()
        step = model_and_step(args.width, args.batch, device)
        variants = ["none", "before, every step", "now, every step", "before, every 10th", "now, every 10th"]
        rates: dict[str, list[float]] = {v: [] for v in variants}
        for _ in range(args.repeats):
            for variant in variants:
                rates[variant].append(run(variant, args.steps, step, helper, path, device))
        helper.flush()
        last = json.loads(Path(path).read_text().splitlines()[-1])
        base = statistics.median(rates["none"])
        where = (
            torch.cuda.get_device_name() if device == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
        )
        print(f"{where}, torch {torch.__version__}, {args.steps} steps x {args.repeats}")
        print(f"{'variant':<22} {'steps/s (median)':>17} {'vs none':>8} {'spread':>13}")
        for variant in variants:
            median = statistics.median(rates[variant])
            ratios = [r / n for r, n in zip(rates[variant], rates["none"], strict=True)]
            spread = f"{min(ratios):.3f}-{max(ratios):.3f}"
            print(f"{variant:<22} {median:>17.1f} {median / base:>7.2f}x {spread:>13}")
        print(f"last line written by the helper: {last}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
