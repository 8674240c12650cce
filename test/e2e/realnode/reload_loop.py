"""The real node's hot-reload program: two gloo ranks step every 0.25 s and print the code's
`VERSION` with every step. The test edits the one line below and runs `kubectl torchrun sync`;
once the new code runs (VERSION 2) each rank stops after 5 steps and the job succeeds.
"""

from __future__ import annotations

import time

VERSION = 1
print(f"process v={VERSION} started", flush=True)  # before torch's import: the test's timeline

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"process v={VERSION} rank={rank} joined its world", flush=True)
    for step in range(1, 2001):
        value = torch.tensor([float(step)])
        dist.all_reduce(value)
        print(f"code v={VERSION} rank={rank} step={step}", flush=True)
        if VERSION > 1 and step == 5:
            break
        time.sleep(0.25)
    dist.barrier()
    dist.destroy_process_group()
    print(f"done v={VERSION} rank={rank}", flush=True)


if __name__ == "__main__":
    main()
