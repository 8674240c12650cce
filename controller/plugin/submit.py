"""`kubectl torchrun submit`: the current directory becomes a running job, no image build.

The job is built first, from nothing but the command line and `-f FILE` (pure: `submit_spec`,
`job_to_submit`): a TorchrunJob manifest from the file, if any, under the flags — each flag
given replaces its field (`--max-restarts` → `failurePolicy.maxRestarts`, `--min-nodes` →
`elastic.minNodes`, `--deadline` → `activeDeadlineSeconds`, ...; `--env` merges by name), every
other field of the file stays. A refusal of a flag's value is the API server's, in one line.

Then, in order, each step only once the previous one succeeded: pack and check the directory (a
refusal sends nothing); `--dry-run` stops here, printing the manifest and the file list; check
the queue exists (and allows the overrides the job sets) so a typo is an error, not a job
waiting forever; create the job; wait for its sync pod and upload the job's first generation;
`--detach` (or a suspended job) stops here; wait for the workspace, follow rank 0's logs until
the job ends and exit with its outcome (0 succeeded, 1 failed, with the reason). Every wait says
what the job waits for, one `waiting: ...` line per change (the queue, the claim, the
scheduler's words for workers that cannot be placed). An upload that fails leaves the job in
place (the error says to retry with `sync`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from controller.api import API_VERSION, JOB_KIND, JobConditionType
from controller.plugin.console import Console
from controller.plugin.errors import PluginError
from controller.plugin.flags import EXIT_CODE
from controller.plugin.kube import Kube
from controller.plugin.logs import LogFollower
from controller.plugin.manifest import SubmitSpec, job_manifest
from controller.plugin.objects import JSON, create_job, get_queue
from controller.plugin.pack import Tree, human_size
from controller.plugin.watch import condition, outcome, wait
from controller.plugin.workspace import packed, send_generation


def file_list(tree: Tree) -> str:
    """The dry run's file list: size and path of each file, then the total."""
    lines = [f"{human_size(e.size):>10}  {e.path}" for e in tree.files]
    lines += [f"{len(tree.files)} files, {human_size(tree.total_bytes)}"]
    return "\n".join(lines)


# metadata the API server sets: a manifest saved with `kubectl get -o yaml` submits as a new job
_SERVER_METADATA = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink")
_REQUIRED = "(kubectl torchrun submit --help)"


@dataclass(frozen=True)
class SpecFlags:
    """The submit flags that each set one field of the job's spec; None (False) leaves the -f
    manifest's value, or the API's default."""

    max_restarts: int | None = None  # failurePolicy.maxRestarts: whole-job restarts
    min_nodes: int | None = None  # elastic.minNodes
    max_nodes: int | None = None  # elastic.maxNodes
    deadline: int | None = None  # activeDeadlineSeconds
    ttl: int | None = None  # ttlSecondsAfterFinished
    suspend: bool = False  # suspend
    in_place: bool = False  # failurePolicy.restartMode: InPlace


def read_manifest(path: Path) -> JSON:
    """The TorchrunJob of `-f path` as a dict; `PluginError` (one line) if it cannot be one."""
    where = f"-f {path}"
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except OSError as exc:
        raise PluginError(f"{where}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        raise PluginError(f"{where}: not YAML: {getattr(exc, 'problem', None) or exc}{at}") from None
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise PluginError(f"{where}: want one TorchrunJob, found {len(docs)} documents")
    job: JSON = docs[0]
    for key, want in (("apiVersion", API_VERSION), ("kind", JOB_KIND)):
        if job.get(key, want) != want:
            raise PluginError(
                f"{where}: {key} is {job[key]!r}, not {want} (kubectl apply -f creates other kinds)"
            )
    spec, metadata = job.get("spec") or {}, job.get("metadata") or {}
    if not isinstance(spec, dict) or not isinstance(metadata, dict):
        raise PluginError(f"{where}: spec and metadata must be mappings")
    if "workspace" in (spec.get("volumes") or {}):
        raise PluginError(
            f"{where}: volumes.workspace is the seed's deprecated spelling: "
            "write workspace: {source: upload}"
        )
    source = (spec.get("workspace") or {}).get("source", "upload")
    if source != "upload":
        raise PluginError(
            f"{where}: workspace.source is {source}, and submit uploads this directory: write source: "
            f"upload (or leave workspace out), or create a {source} job with kubectl apply -f {path}"
        )
    return job


def submit_spec(
    base: JSON | None,
    *,
    queue: str | None,
    command: str | None,
    nodes: int | None = None,
    gpus: int | None = None,
    name: str | None = None,
    env: tuple[tuple[str, str], ...] = (),
    source: str = "",
) -> SubmitSpec:
    """What the flags ask for, each one not given taken from the -f manifest `base` (read from
    `source`); `PluginError` (exit 2) naming the flag when neither has the queue or the command."""
    spec, metadata = (base or {}).get("spec") or {}, (base or {}).get("metadata") or {}
    queue = queue or spec.get("jobQueue")
    command = command or spec.get("command")
    if not queue:
        raise PluginError(f"--queue: required {_REQUIRED}" + _or_in(source, "jobQueue"), EXIT_CODE)
    if not command:
        raise PluginError(f"command: required {_REQUIRED}" + _or_in(source, "command"), EXIT_CODE)
    if nodes is None and gpus is None:  # the file's size, unless a flag chose one
        nodes, gpus = spec.get("numNodes"), spec.get("numGPUs")
    return SubmitSpec(
        queue=str(queue),
        command=str(command),
        nodes=nodes,
        gpus=gpus,
        name=name or metadata.get("name"),
        env=env,
    )


def _or_in(source: str, field: str) -> str:
    return f", or spec.{field} in {source}" if source else ""


def job_to_submit(spec: SubmitSpec, flags: SpecFlags, directory: str, base: JSON | None = None) -> JSON:
    """The TorchrunJob to create: `spec` and `flags` over the -f manifest `base` (see the module
    docstring); `PluginError` (exit 2) when it has no size or half an elastic range."""
    job = job_manifest(spec, directory)
    if base is not None:
        job = _over_file(job, copy.deepcopy(base))
    body = job["spec"]
    _set_fields(body, flags)
    if "numNodes" not in body and "numGPUs" not in body:
        if "minNodes" not in (body.get("elastic") or {}):
            raise PluginError(f"--nodes or --gpus: one is required {_REQUIRED}", EXIT_CODE)
        body["numNodes"] = body["elastic"]["minNodes"]  # an elastic job starts small; it is grown
    return job


def _set_fields(body: JSON, flags: SpecFlags) -> None:
    """Each flag given replaces its field of the spec `body`."""
    if flags.max_restarts is not None:
        body["failurePolicy"] = {**(body.get("failurePolicy") or {}), "maxRestarts": flags.max_restarts}
    if flags.in_place:
        body["failurePolicy"] = {**(body.get("failurePolicy") or {}), "restartMode": "InPlace"}
    if flags.min_nodes is not None or flags.max_nodes is not None:
        elastic = {**(body.get("elastic") or {})}
        for key, value in (("minNodes", flags.min_nodes), ("maxNodes", flags.max_nodes)):
            if value is not None:
                elastic[key] = value
        for key, flag, other in (
            ("minNodes", "--min-nodes", "--max-nodes"),
            ("maxNodes", "--max-nodes", "--min-nodes"),
        ):
            if key not in elastic:
                raise PluginError(f"{flag}: required with {other} (spec.elastic takes both)", EXIT_CODE)
        body["elastic"] = elastic
    for key, value in (("activeDeadlineSeconds", flags.deadline), ("ttlSecondsAfterFinished", flags.ttl)):
        if value is not None:
            body[key] = value
    if flags.suspend:
        body["suspend"] = True


def _over_file(job: JSON, base: JSON) -> JSON:
    """`job` (from the flags) over the -f manifest `base`: the file's other fields stay."""
    metadata = {k: v for k, v in (base.get("metadata") or {}).items() if k not in _SERVER_METADATA}
    if "name" in job["metadata"] or "generateName" not in metadata:
        metadata.pop("generateName", None)
        metadata.update(job["metadata"])
    spec = {k: v for k, v in (base.get("spec") or {}).items() if k not in ("numNodes", "numGPUs")}
    spec.update({k: v for k, v in job["spec"].items() if k not in ("workspace", "overrides")})
    spec.setdefault("workspace", job["spec"]["workspace"])
    env = (job["spec"].get("overrides") or {}).get("env")
    if env:  # merged by name, the flag's value wins
        overrides = {**(spec.get("overrides") or {})}
        flagged = {e["name"] for e in env}
        overrides["env"] = [e for e in overrides.get("env") or [] if e.get("name") not in flagged] + env
        spec["overrides"] = overrides
    rest = {k: v for k, v in base.items() if k != "status"}
    return {**rest, "apiVersion": API_VERSION, "kind": JOB_KIND, "metadata": metadata, "spec": spec}


def check_queue(kube: Kube, job: JSON, env_flag: bool) -> None:
    """`PluginError` if the job's queue does not exist, or refuses an override the job sets
    (`env_flag`: its `env` came from `--env`)."""
    name = job["spec"]["jobQueue"]
    queue = get_queue(kube, name)
    if queue is None:
        raise PluginError(f'queue "{name}" not found (kubectl get torchrunqueues lists the queues)')
    allowed = (queue.get("spec") or {}).get("allowOverrides") or []
    for field, value in (job["spec"].get("overrides") or {}).items():
        if value in (None, "", [], {}) or field in allowed:
            continue
        if field == "env" and env_flag:
            raise PluginError(
                f'queue "{name}" does not allow --env: its spec.allowOverrides must list "env" '
                "(ask the queue's owner), or submit without --env"
            )
        raise PluginError(
            f'queue "{name}" does not allow overrides.{field}: its spec.allowOverrides must list '
            f'"{field}" (ask the queue\'s owner), or leave it out'
        )


def _workspace_ready(job: JSON) -> bool | None:
    c = condition(job, JobConditionType.WORKSPACE_READY)
    return True if c is not None and c.get("status") == "True" else None


def submit(
    manifest: JSON,
    root: Path,
    connect: Callable[[], Kube],
    console: Console,
    *,
    dry_run: bool,
    detach: bool,
    force: bool,
    env_flag: bool = False,
) -> int:
    """Run `submit` of the job `manifest` (see the module docstring); the exit code."""
    with packed(root, force) as pack:
        if dry_run:
            console.line(yaml.safe_dump(manifest, sort_keys=False).rstrip())
            console.line("---")
            console.line(file_list(pack.tree))
            console.line(f"archive: {pack.summary()}")
            return 0
        kube = connect()
        check_queue(kube, manifest, env_flag)
        console.say(f"packed {root.resolve()}: {pack.summary()}")
        job = create_job(kube, manifest)
        name = job["metadata"]["name"]
        console.say(f"created job {name} in namespace {kube.namespace}")
        generation = int((job["spec"].get("workspace") or {}).get("generation") or 0)
        send_generation(kube, name, generation, pack, console)
    if job["spec"].get("suspend"):
        console.say(f"job {name} is suspended: kubectl torchrun resume {name} runs it")
        return 0
    if detach:
        console.say(f"detached: kubectl torchrun logs {name} --follow; kubectl torchrun status {name}")
        return 0
    wait(kube, name, _workspace_ready, console.say)
    console.say(f"workspace ready; following rank 0 of {name} until the job ends")
    final = LogFollower(kube, name, {0}, prefix=False, out=console.line, say=console.say).follow()
    ended = outcome(final)
    assert ended is not None  # follow() returns only a terminal job
    console.say(ended[1])
    return ended[0]
