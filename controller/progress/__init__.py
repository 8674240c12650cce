"""Training progress: what a training program reports, and how it reaches the job's status.

The training program appends JSON lines to `TORCHRUN_PROGRESS_FILE` (`torchrun_progress.report`
does it for Python programs). The reporter sidecar of every worker pod (`reporter.py`, run as
`python -m controller.progress.reporter`) tails that file (`tail.py`), keeps the latest record and
when it last changed, serves them as Prometheus metrics, and POSTs them to the controller's
progress endpoint (`endpoint.py`) with a projected service-account token. The leader checks the
token with a TokenReview and proves the pod is the job's by its controller owner chain
(`identity.py`), keeps the reports in memory (`store.py`), and the job reconciler turns them into
`status.progress` and the `Progressing` condition at most once per `--progress-period`
(`torchrunjob/progress.py`). Why push and not pull: `docs/design/progress.md`.

Pure parts, no I/O: `record.py` (the line parser, every input bounded), `eta.py` (the rate and
the estimated end), `stall.py` (the stall decision). `store.py` holds state but does no I/O.
"""
