"""Training progress: what a training program reports, and how it reaches the job's status.

The training program appends JSON lines to `TORCHRUN_PROGRESS_FILE` (`torchrun_progress.report`
does it for Python programs). The reporter sidecar of every worker pod (`sidecar/`, run as
`python -m controller.progress.sidecar.reporter`) tails that file, keeps the latest record and
when it last changed, serves them as Prometheus metrics, and POSTs them to the controller's
progress endpoint with a projected service-account token. `kubectl torchrun stack` dumps the
pod's Python stacks through the same sidecar (`sidecar/stack.py`).

Both sides: `record.py` (the line parser, every input bounded) and `saved.py` (the newest
complete checkpoint rank 0's sidecar tells, and its parser).

The leader's side: `endpoint.py` (HTTPS `POST /v1/progress`, served over `tls.py`'s
certificate) screens the token at no API cost (`tokens.py`), checks it with a TokenReview and
proves the pod is the job's from the caches (`identity.py`), and keeps the reports in memory
(`store.py`), and the in-place supervisors' states and the word each is answered
(`supervisors.py`); the job reconciler turns them into `status.progress` (`summary.py`, with `eta.py`'s
rate and estimated end) and the `Progressing` condition (`stall.py`, the stall decision) at most
once per `--progress-period` (`torchrunjob/progress.py`). Pure, no I/O: `record.py`, `eta.py`,
`stall.py`, `summary.py`; `store.py` holds state but does no I/O. Why push and not pull:
`docs/design/progress.md`.
"""
