"""Where a generation's code comes from besides an upload: `git`, `s3` and `pvc`.

One module per source, each imported only when `python -m controller.sync fetch --source <name>`
runs it (so `s3`'s boto3 is needed only by s3 syncs). Each fills the generation's temporary
directory and hands it to `controller.sync.generations.publish`, so every source gets the same
atomic publication, marker, `CURRENT` and recorded failure as an upload, and the same checks:
`check_tree` or the archive extractor, against the same limits.
"""
