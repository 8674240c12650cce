"""An unchanged Hugging Face Trainer program: nothing in it knows where it runs.

A GPT-2 of one tiny layer built from its config (nothing from a hub) learns a fixed synthetic
dataset (sample i is a function of i) for --steps optimizer steps, saving `checkpoint-<step>/`
every --save steps into `output_dir=out` — a relative directory, as real programs have. Every
rank prints `loss rank=<r> step=<s> <loss>` for each step it trains (the exact loss, not the
rounded one the Trainer logs) and `done step=<s>` at the end. With --crash-at S, a run that started
from scratch raises at step S (a crash, as a bug or a bad node makes); a resumed run does not.
--step-seconds slows each step down so that a test can stop it mid-run. It prints `site rank=<r>
<file>`: the `sitecustomize` module Python ran at start-up (the image's own, if it has one).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

RANK = int(os.environ.get("RANK", "0"))


class Tokens(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 512

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, 64, (16,), generator=g)
        return {"input_ids": ids, "labels": ids.clone()}


class Crash(TrainerCallback):
    def __init__(self, at: int | None, seconds: float) -> None:
        self.at, self.seconds, self.start = at, seconds, 0

    def on_train_begin(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        self.start = state.global_step
        print(f"start rank={RANK} step={self.start}", flush=True)

    def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(self.seconds)
        if self.at is not None and self.start == 0 and state.global_step == self.at:
            raise RuntimeError(f"crash at step {self.at}")


class LoggingTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # type: ignore[no-untyped-def]
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        print(f"loss rank={RANK} step={self.state.global_step + 1} {float(loss):.9f}", flush=True)
        return loss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--save", type=int, default=10)
    parser.add_argument("--crash-at", type=int)
    parser.add_argument("--step-seconds", type=float, default=0.0)
    args = parser.parse_args()
    site = sys.modules.get("sitecustomize")
    print(f"site rank={RANK} {getattr(site, '__file__', None)}", flush=True)
    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=16,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # fmt: skip
    training = TrainingArguments(
        output_dir="out", max_steps=args.steps, per_device_train_batch_size=4, learning_rate=1e-3,
        save_strategy="steps", save_steps=args.save, logging_steps=1, report_to="none",
        disable_tqdm=True, use_cpu=True, ddp_backend="gloo", seed=0, dataloader_num_workers=0,
    )  # fmt: skip
    trainer = LoggingTrainer(
        model=GPT2LMHeadModel(config), args=training, train_dataset=Tokens(),
        callbacks=[Crash(args.crash_at, args.step_seconds)],
    )  # fmt: skip
    trainer.train()
    trainer.save_model("out/final")
    print(f"done rank={RANK} step={trainer.state.global_step}", flush=True)


if __name__ == "__main__":
    main()
