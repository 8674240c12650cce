"""An unchanged Lightning program: nothing in it knows where it runs.

A small MLP learns y = sum(x) with batches that are a function of the step (the batch of step s is
drawn from a generator seeded with s, so a resumed run sees the data an uninterrupted one would).
`ModelCheckpoint(dirpath="ckpts", every_n_train_steps=--save, save_top_k=-1)` saves
`epoch=0-step=<s>.ckpt` into a relative directory, as real programs do. Launched on every
node (`num_nodes` from the launcher's WORLD_SIZE, one process per node, DDP on gloo). Every rank prints
`loss rank=<r> step=<s> <loss>` for each step it trains and `done rank=<r> step=<s>` at the end.
With --crash-at S, a run that started from scratch raises at step S; a resumed run does not.
--step-seconds slows each step down so that a test can stop it mid-run. It prints `site rank=<r>
<file>`: the `sitecustomize` module Python ran at start-up (the image's own, if it has one).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import lightning
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

RANK = int(os.environ.get("RANK", "0"))


class Regression(lightning.LightningModule):
    def __init__(self, crash_at: int | None, seconds: float) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
        self.crash_at, self.seconds, self.start = crash_at, seconds, 0

    def on_train_start(self) -> None:
        self.start = self.global_step
        print(f"start rank={RANK} step={self.start}", flush=True)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        step = self.global_step + 1
        if self.crash_at is not None and self.start == 0 and step == self.crash_at:
            raise RuntimeError(f"crash at step {step}")
        g = torch.Generator().manual_seed(step * 1000 + RANK)
        x = torch.randn(16, 8, generator=g)
        loss = torch.nn.functional.mse_loss(self.net(x).squeeze(1), x.sum(1))
        print(f"loss rank={RANK} step={step} {loss.item():.9f}", flush=True)
        time.sleep(self.seconds)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(torch.zeros(100_000, 1), batch_size=1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--save", type=int, default=10)
    parser.add_argument("--crash-at", type=int)
    parser.add_argument("--step-seconds", type=float, default=0.0)
    args = parser.parse_args()
    site = sys.modules.get("sitecustomize")
    print(f"site rank={RANK} {getattr(site, '__file__', None)}", flush=True)
    trainer = lightning.Trainer(
        max_steps=args.steps, accelerator="cpu", devices=1, num_nodes=int(os.environ.get("WORLD_SIZE", "1")),
        strategy="ddp" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else "auto",
        callbacks=[ModelCheckpoint(dirpath="ckpts", every_n_train_steps=args.save, save_top_k=-1)],
        logger=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(Regression(args.crash_at, args.step_seconds))
    print(f"done rank={RANK} step={trainer.global_step}", flush=True)


if __name__ == "__main__":
    main()
