"""What checkpoints add to the worker Job (controller/torchrunjob/manifests/checkpoint.py): the
ranks' environment, the `prepare` container's resume choice, the grace period of a stop."""

from __future__ import annotations

from jobspecs import env_of, job, queue, worker

from controller.api import TorchrunJob
from controller.api.validation import validate_job
from controller.sync import protocol
from controller.sync.cli import _parser


def prepare_args(manifest: dict[str, object]) -> dict[str, object]:
    spec = manifest["spec"]["template"]["spec"]  # type: ignore[index]
    prepare = spec["initContainers"][0]
    assert prepare["name"] == "prepare"
    return vars(_parser().parse_args(prepare["command"][len(protocol.PROGRAM) :]))


def test_without_a_checkpoints_volume_the_ranks_still_learn_the_attempt_and_the_stop_signal() -> None:
    manifest = worker(job(), queue(), restart=2)
    env = env_of(manifest)
    assert (env["TORCHRUN_ATTEMPT"], env["TORCHRUN_STOP_SIGNAL"]) == ("2", "SIGTERM")
    assert "TORCHRUN_CHECKPOINT_DIR" not in env
    assert prepare_args(manifest)["checkpoints"] is None
    assert manifest["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 120


def test_the_framework_hooks_are_on_unless_the_job_or_its_queue_turns_them_off() -> None:
    def hooks(job_progress: dict[str, object] | None, queue_progress: dict[str, object] | None) -> str:
        j = job(progress=job_progress) if job_progress is not None else job()
        q = queue(progress=queue_progress) if queue_progress is not None else queue()
        return env_of(worker(j, q, restart=0))["TORCHRUN_FRAMEWORK_HOOKS"]

    assert hooks(None, None) == "1"
    assert hooks(None, {"frameworkHooks": False}) == "0"
    assert hooks({"frameworkHooks": True}, {"frameworkHooks": False}) == "1"  # the job's wins
    assert hooks({"frameworkHooks": False}, None) == "0"
    assert hooks({"stallTimeoutSeconds": 60}, {"frameworkHooks": False}) == "0"  # field by field


def test_with_checkpoints_prepare_chooses_from_the_volume_and_rank_0_prunes() -> None:
    q = queue(
        storage={"checkpoints": {"enabled": True, "mountPath": "/ckpt", "keep": 3}},
        terminationGracePeriodSeconds=45,
        env=[{"name": "TORCHRUN_ATTEMPT", "value": "user's"}],
    )
    manifest = worker(job(), q, restart=4)
    pod = manifest["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 45
    env = env_of(manifest)
    assert (env["TORCHRUN_CHECKPOINT_DIR"], env["TORCHRUN_ATTEMPT"]) == ("/ckpt", "4")
    names = [e["name"] for e in pod["containers"][0]["env"]]
    assert names.count("TORCHRUN_ATTEMPT") == 1  # ours: the queue's cannot shadow it
    args = prepare_args(manifest)
    assert (args["checkpoints"], args["attempt"], args["keep"], args["target"]) == (
        "/ckpt",
        4,
        3,
        "/opt/torchrun",
    )
    prepare = pod["initContainers"][0]
    assert {"name": "checkpoints", "mountPath": "/ckpt"} in prepare["volumeMounts"]
    (rank,) = prepare["env"]
    assert rank["name"] == "TORCHRUN_NODE_RANK"
    assert "job-completion-index" in rank["valueFrom"]["fieldRef"]["fieldPath"]
    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "j-checkpoints"}} in pod["volumes"]


def test_without_keep_nothing_is_pruned() -> None:
    q = queue(storage={"checkpoints": {"enabled": True}})
    assert prepare_args(worker(job(), q))["keep"] is None


def test_an_s3_mirror_gives_prepare_the_uri_and_the_secrets_variables() -> None:
    mirror = {"uri": "s3://bucket/ckpt/", "secret": "s3-creds"}
    q = queue(storage={"checkpoints": {"enabled": True, "s3": mirror}})
    manifest = worker(job(), q)
    assert prepare_args(manifest)["s3"] == "s3://bucket/ckpt/ns/j/job-u-1/"  # the job's own, this UID's
    prepare = manifest["spec"]["template"]["spec"]["initContainers"][0]
    assert prepare["envFrom"] == [{"secretRef": {"name": "s3-creds"}}]
    assert "envFrom" not in manifest["spec"]["template"]["spec"]["containers"][0]  # the ranks never see it


def test_a_job_overrides_keep_only_when_its_queue_allows_it() -> None:
    checkpoints = {"checkpoints": {"enabled": True, "keep": 5}}
    j = job(overrides={"checkpointsKeep": 2})
    assert (
        prepare_args(worker(j, queue(storage=checkpoints, allowOverrides=["checkpointsKeep"])))["keep"] == 2
    )
    assert prepare_args(worker(j, queue(storage=checkpoints)))["keep"] == 5  # not allowed: the queue's


def test_admission_names_a_keep_override_the_queue_does_not_allow() -> None:
    q = queue(storage={"checkpoints": {"enabled": True}}, allowOverrides=["image"])
    errors = validate_job(job(overrides={"checkpointsKeep": 2}), q)
    assert [e.path for e in errors] == ["spec.overrides.checkpointsKeep"]
    assert "does not allow overriding checkpointsKeep" in errors[0].message


def test_each_job_mirrors_under_its_namespace_and_name_and_only_a_persisted_claim_shares_across_uids() -> (
    None
):
    """Two namespaces, two names, two UIDs of one name: never one prefix, whatever the queue's
    prefix looks like; a persisted claim's resubmission continues from the same prefix."""

    def prefix(uri: str, ns: str, name: str, uid: str, persist: bool = False) -> object:
        q = queue(storage={"checkpoints": {"enabled": True, "persist": persist, "s3": {"uri": uri}}})
        meta = {"name": name, "namespace": ns, "uid": uid}
        j = TorchrunJob.from_json(
            {"metadata": meta, "spec": {"jobQueue": "q", "numNodes": 1, "command": "x"}}
        )
        return prepare_args(worker(j, q))["s3"]

    assert prefix("s3://b/p", "a", "train", "1") == "s3://b/p/a/train/job-1/"  # trailing / added
    assert prefix("s3://b", "a", "train", "1") == "s3://b/a/train/job-1/"
    seen = {
        prefix("s3://b/p/", ns, name, uid) for ns in ("a", "b") for name in ("x", "y") for uid in ("1", "2")
    }
    assert len(seen) == 8
    assert (
        prefix("s3://b/p/", "a", "x", "1", True)
        == prefix("s3://b/p/", "a", "x", "2", True)
        == ("s3://b/p/a/x/persisted/")
    )
    assert prefix("s3://b/p/", "b", "x", "1", True) != prefix("s3://b/p/", "a", "x", "1", True)
