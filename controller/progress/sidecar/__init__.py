"""The reporter sidecar: what runs in every worker pod's `progress-reporter` container.

`python -m controller.progress.sidecar.reporter` is the container's command
(`torchrunjob/manifests/progress.py`); it runs from the controller's image, beside the training
program, and sends the controller what that program reports. The modules:

- `reporter`: the entry point and its loop — follow the progress file, push to the leader's
  progress endpoint (`Pusher`), flush on SIGTERM; `reporter stack` runs `stack`.
- `inplace`: the in-place link — the supervisor's state up to the endpoint, the controller's word
  down to the supervisor (`Watcher`), for a job that restarts in place.
- `tail`: `Tailer`, the latest valid record appended to the progress file, every read bounded.
- `server`: `Latest` (the record and when it changed) and the sidecar's own `/metrics` server.
- `stack`: `kubectl torchrun stack`'s in-pod half, a py-spy dump of every Python process of the
  pod (the plugin's half, which execs it, is `controller/plugin/stack.py`).

Only the sidecar runs these; the leader imports none of them but `reporter`'s timing constants
(`progress/stall.py` judges silence by them). What both sides parse lives one floor up: the
record (`progress/record.py`) and the newest checkpoint (`progress/saved.py`).
"""
