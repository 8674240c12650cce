"""A 2-rank gloo loop that reports its progress, and hangs on purpose in its first attempt.

Every step all-reduces a tensor and reports through `torchrun_progress` (on PYTHONPATH in every
worker pod: /opt/torchrun/python). With `--hang-after K`, in the first attempt only
(`TORCHRUN_ATTEMPT` 0), both ranks call `hang_in_collective` after step K: rank 1 sleeps forever
inside it, rank 0 waits in the all-reduce rank 1 never joins — the stack of both shows the
function. A whole-job restart (attempt 1) or a restart in place (`TORCHRUN_IN_PLACE_GENERATION`
1) runs all steps and exits 0. With `--save-at 5,20`, rank
0 saves a (tiny) checkpoint at those steps through `torchrun_checkpoint`, as the README says.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torchrun_checkpoint
import torchrun_progress


def hang_in_collective(step: int) -> None:
    print(f"hang rank={dist.get_rank()} step={step}", flush=True)
    if dist.get_rank() == 1:
        while True:
            time.sleep(3600)
    dist.all_reduce(torch.ones(1))  # waits for rank 1, which never comes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--step-seconds", type=float, default=1.0)
    parser.add_argument("--hang-after", type=int, default=0)
    parser.add_argument("--save-at", default="")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    attempt = int(os.environ.get("TORCHRUN_ATTEMPT", "0"))
    generation = int(os.environ.get("TORCHRUN_IN_PLACE_GENERATION", "0"))  # restarted in place: > 0
    print(
        f"world rank={rank} size={dist.get_world_size()} attempt={attempt} generation={generation}",
        flush=True,
    )
    save_at = {int(s) for s in args.save_at.split(",") if s}
    started = time.monotonic()
    for step in range(1, args.steps + 1):
        value = torch.tensor([float(step)])
        dist.all_reduce(value)
        rate = step / max(time.monotonic() - started, 1e-6)
        torchrun_progress.report(step=step, total_steps=args.steps, loss=1.0 / step, samples_per_second=rate)
        print(f"progress rank={rank} step={step}", flush=True)
        if step in save_at and rank == 0:
            path = torchrun_checkpoint.path_for(step)
            torch.save({"step": step}, path / "state.pt")
            torchrun_checkpoint.mark_complete(path)
        if attempt == 0 and generation == 0 and step == args.hang_after:
            hang_in_collective(step)
        time.sleep(args.step_seconds)
    dist.destroy_process_group()
    print(f"done rank={rank} steps={args.steps}", flush=True)


if __name__ == "__main__":
    main()
