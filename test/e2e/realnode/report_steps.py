"""Reports `--steps` steps through `torchrun_progress` and exits right after the last one.

The last step is written to the progress file at exit (the helper's atexit), so it reaches the
controller through the reporter sidecar's final flush on SIGTERM (the kubelet stops the sidecar
once this container has ended) unless the reporter's regular push, at most one per 2 s, came first.
"""

from __future__ import annotations

import argparse
import time

import torchrun_progress


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--step-seconds", type=float, default=0.2)
    args = parser.parse_args()
    for step in range(1, args.steps + 1):
        if step > 1:
            time.sleep(args.step_seconds)
        torchrun_progress.report(step=step, total_steps=args.steps)
    print(f"done steps={args.steps}", flush=True)


if __name__ == "__main__":
    main()
