"""A small but real distributed training program for the real node's end-to-end test.

Run by torchrun (gloo, CPU): a 161-parameter MLP learns a fixed linear map from synthetic data
with DistributedDataParallel. Every rank prints where it runs (`world`), its loss at every step
(`loss`) and what the worker pod gives it (`shm`: /dev/shm's size; `cwd`); rank 0 writes the
trained weights and a summary to the checkpoint directory. With `--fail-rank R`, rank R exits 1
once the world has formed, so a test sees a real failure after a real rendezvous.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--checkpoint-dir", default="/checkpoints")
    parser.add_argument("--fail-rank", type=int, default=-1)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"world rank={rank} size={world} host={socket.gethostname()}", flush=True)
    shm = os.statvfs("/dev/shm")
    print(
        f"shm bytes={shm.f_blocks * shm.f_frsize} cwd={os.getcwd()} file={os.path.abspath(__file__)}",
        flush=True,
    )

    ranks = torch.tensor([float(rank)])
    dist.all_reduce(ranks)  # every rank took part: 0 + 1 + ... + (world - 1)
    print(f"allreduce sum={int(ranks.item())}", flush=True)
    if rank == args.fail_rank:
        print(f"rank {rank} fails on purpose", flush=True)
        return 1

    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard of data
    target = torch.linspace(-1.0, 1.0, 8).unsqueeze(1)
    first = last = 0.0
    for step in range(args.steps):
        x = torch.randn(64, 8, generator=generator)
        loss = torch.nn.functional.mse_loss(model(x), x @ target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        last = loss.item()
        first = first or last
        print(f"loss rank={rank} step={step} value={last:.6f}", flush=True)

    if rank == 0:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        torch.save(model.module.state_dict(), os.path.join(args.checkpoint_dir, "model.pt"))
        params = sum(p.numel() for p in model.parameters())
        summary = {"world_size": world, "params": params, "first_loss": first, "last_loss": last}
        with open(os.path.join(args.checkpoint_dir, "summary.json"), "w") as f:
            json.dump(summary, f)
        print(f"checkpoint written {summary}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
