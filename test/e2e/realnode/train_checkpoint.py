"""The real node's checkpoint test program: trains, checkpoints every k steps with the helper the
controller ships (`torchrun_checkpoint`, from /opt/torchrun/python), resumes where it stopped.

Run by torchrun (gloo, CPU), the MLP of train.py. Steps are counted from 1; after step s with s %
every == 0 it saves `step-<s>/` (rank 0 the model and optimizer, every rank its data generator),
then rank 0 marks it complete. On start, `torchrun_checkpoint.resume_from()` says what to load:
every rank prints `resumed from step <s>` and continues at s + 1. When the pod is asked to stop
(`stop_requested()`, SIGTERM forwarded by torchrun), the ranks agree on it at the end of a step
(an all-reduce of the flag), save `step-<s>/` (with a file `saved-on-stop`), print `saved step <s>
on stop` and exit 0. With `--fail-rank R --fail-after S`, rank R exits 1 after step S of the first
attempt (TORCHRUN_ATTEMPT 0) and of its first workers (TORCHELASTIC_RESTART_COUNT and
TORCHRUN_IN_PLACE_GENERATION 0: workers restarted in place, by torchrun's `--max_restarts` or the
supervisor's next generation, do not fail again). Every rank appends
`attempt step loss` lines to `<checkpoint dir>/losses-rank<R>.txt` (a file: never taken for a
checkpoint), after a line `# start attempt=<A> from=<s>` at each start, and ends with
`done step=<total>`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torchrun_checkpoint as tc
from torch.nn.parallel import DistributedDataParallel


def save(
    step: int,
    rank: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    gen: torch.Generator,
    on_stop: bool = False,
) -> None:
    path = tc.path_for(step)
    if rank == 0:
        path.mkdir(exist_ok=True)
    dist.barrier()
    if rank == 0:
        torch.save(
            {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step},
            path / "model.pt",
        )
    torch.save(gen.get_state(), path / f"rng-{rank}.pt")
    if on_stop and rank == 0:
        (path / "saved-on-stop").write_text(f"{step}\n")
    dist.barrier()
    if rank == 0:
        tc.mark_complete(path)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=36)
    parser.add_argument("--every", type=int, default=4)
    parser.add_argument("--step-seconds", type=float, default=0.0)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-after", type=int, default=-1)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1000 + rank)
    target = torch.linspace(-1.0, 1.0, 8).unsqueeze(1)
    start = 1
    # restarted in place: by torchrun's --max_restarts, or by the supervisor's next generation
    in_place = max(
        int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
        int(os.environ.get("TORCHRUN_IN_PLACE_GENERATION", "0")),
    )
    resume = tc.resume_from()
    if resume is not None:
        state = torch.load(resume / "model.pt")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        gen.set_state(torch.load(resume / f"rng-{rank}.pt"))
        start = state["step"] + 1
        print(
            f"resumed from step {state['step']} ({resume}) attempt={tc.attempt()} in-place={in_place}",
            flush=True,
        )
    with open(os.path.join(str(tc.checkpoint_dir()), f"losses-rank{rank}.txt"), "a") as losses:
        losses.write(f"# start attempt={tc.attempt()} from={start - 1}\n")
        for step in range(start, args.steps + 1):
            x = torch.randn(64, 8, generator=gen)
            loss = torch.nn.functional.mse_loss(model(x), x @ target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print(f"loss rank={rank} step={step} value={loss.item():.6f}", flush=True)
            losses.write(f"{tc.attempt()} {step} {loss.item():.6f}\n")
            losses.flush()
            if rank == args.fail_rank and step == args.fail_after and tc.attempt() == 0 and in_place == 0:
                print(f"rank {rank} fails on purpose after step {step}", flush=True)
                return 1
            stop = torch.tensor([1.0 if tc.stop_requested() else 0.0])
            dist.all_reduce(stop, op=dist.ReduceOp.MAX)
            if stop.item() > 0:
                save(step, rank, model, optimizer, gen, on_stop=True)
                print(f"saved step {step} on stop", flush=True)
                return 0
            if step % args.every == 0:
                save(step, rank, model, optimizer, gen)
            time.sleep(args.step_seconds)
    print(f"done step={args.steps}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
