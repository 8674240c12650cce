"""Why workers do not start: the reasons the kubelet, the Job controller, the scheduler and Kueue
give, their precedence, and the bounds on what is quoted (controller/torchrunjob/starting.py)."""

from __future__ import annotations

from typing import Any

from controller.api.reasons import Reason
from controller.torchrunjob import starting
from controller.torchrunjob.starting import Blocked, Evidence, blocked

ROOT_MESSAGE = (
    'container has runAsNonRoot and image will run as root (pod: "j-0_ns(uid)", container: torchrun)'
)


def pod(
    name: str,
    *,
    phase: str = "Pending",
    node: str | None = "n1",
    waits: dict[str, tuple[str, str]] | None = None,
    init_waits: dict[str, tuple[str, str]] | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    def statuses(w: dict[str, tuple[str, str]] | None) -> list[dict[str, Any]]:
        return [
            {"name": c, "state": {"waiting": {"reason": r, "message": m}}} for c, (r, m) in (w or {}).items()
        ]

    return {
        "metadata": {"name": name, "uid": uid or f"uid-{name}"},
        "spec": {"nodeName": node} if node else {},
        "status": {
            "phase": phase,
            "startTime": "2026-11-27T00:00:00Z",
            "containerStatuses": statuses(waits),
            "initContainerStatuses": statuses(init_waits),
        },
    }


def test_root_image_under_run_as_non_root_is_a_config_error_with_the_one_line_fix() -> None:
    pods = [
        pod("j-0", waits={"torchrun": ("CreateContainerConfigError", ROOT_MESSAGE)}),
        pod("j-1", waits={"torchrun": ("CreateContainerConfigError", ROOT_MESSAGE)}),
    ]
    got = blocked(Evidence(pods=pods))
    assert got is not None and got.reason is Reason.CONTAINER_CONFIG_ERROR
    # the same words on two pods are quoted once, after the first pod by name
    assert got.message.startswith("pod j-0: container torchrun: CreateContainerConfigError: container has")
    assert got.message.count("runAsNonRoot and image") == 1
    assert "runAsUser" in got.message


def test_image_pull_errors_of_any_container_and_crash_loops_of_the_sidecar() -> None:
    pulled = pod("j-0", waits={"torchrun": ("ImagePullBackOff", 'Back-off pulling image "nope:1"')})
    looping = pod("j-1", init_waits={"progress-reporter": ("CrashLoopBackOff", "back-off 10s restarting")})
    assert blocked(Evidence(pods=[looping])) == Blocked(
        Reason.CONTAINER_CRASH_LOOPING,
        "pod j-1: container progress-reporter: CrashLoopBackOff: back-off 10s restarting",
    )
    # an image that cannot be pulled comes before a crash loop: the kubelet pulls first
    got = blocked(Evidence(pods=[looping, pulled]))
    assert got is not None and got.reason is Reason.IMAGE_PULL_FAILED
    assert got.message == 'pod j-0: container torchrun: ImagePullBackOff: Back-off pulling image "nope:1"'


def test_routine_waits_and_finished_pods_are_no_reason() -> None:
    pods = [
        pod("j-0", waits={"torchrun": ("ContainerCreating", "")}),
        pod("j-1", init_waits={"prepare": ("PodInitializing", "")}),
        pod("j-2", phase="Failed", waits={"torchrun": ("CreateContainerConfigError", "gone")}),
    ]
    assert blocked(Evidence(pods=pods)) is None


def test_precedence_earliest_stage_wins() -> None:
    config = pod("j-0", waits={"torchrun": ("CreateContainerConfigError", 'configmap "cfg" not found')})
    full = Evidence(
        pods=[config],
        unschedulable="pod j-1: 0/3 nodes are available",
        kueue="Kueue workload w: couldn't assign flavors",
        failed_create="job j: pods is forbidden: exceeded quota",
        mounts={'FailedMount: configmap "cfg" not found': "j-2"},
    )
    order = []
    evidence = full
    for field in ("kueue", "failed_create", "unschedulable", "mounts", "pods"):
        got = blocked(evidence)
        assert got is not None
        order.append(got.reason)
        evidence = Evidence(**{**evidence.__dict__, field: [] if field == "pods" else None})
    assert order == [
        Reason.WAITING_FOR_ADMISSION,
        Reason.POD_CREATE_FAILED,
        Reason.UNSCHEDULABLE,
        Reason.VOLUME_MOUNT_FAILED,
        Reason.CONTAINER_CONFIG_ERROR,
    ]
    assert blocked(evidence) is None


def test_quoted_words_are_bounded() -> None:
    pods = [pod(f"j-{i}", waits={"torchrun": ("ErrImagePull", f"{i}" + "x" * 5000)}) for i in range(50)]
    got = blocked(Evidence(pods=pods))
    assert got is not None and got.reason is Reason.IMAGE_PULL_FAILED
    assert len(got.message) <= starting.TOTAL_LIMIT + 40
    assert "more)" in got.message
    assert "\n" not in starting.bounded("a\nb\tc") and starting.bounded("a\nb") == "a b"


def test_mount_failures_quote_the_newest_event_of_pods_still_being_created() -> None:
    creating = pod("j-0", waits={"torchrun": ("ContainerCreating", "")}, uid="u0")
    running = pod("j-1", phase="Running", uid="u1")
    events = [
        {"involvedObject": {"uid": "u0"}, "reason": "FailedMount", "lastTimestamp": "2026-11-27T00:00:01Z",
         "message": 'MountVolume.SetUp failed for volume "cfg" : configmap "cfg" not found'},
        {"involvedObject": {"uid": "u0"}, "reason": "FailedMount", "lastTimestamp": "2026-11-27T00:00:09Z",
         "message": 'MountVolume.SetUp failed for volume "cfg" : configmap "cfg" not found (again)'},
        {"involvedObject": {"uid": "u1"}, "reason": "FailedMount", "message": "old, it runs now"},
        {"involvedObject": {"uid": "someone-else"}, "reason": "FailedMount", "message": "not ours"},
        {"involvedObject": {"uid": "u0"}, "reason": "Pulling", "message": "not a mount"},
    ]  # fmt: skip
    said = starting.mount_failures([creating, running], events)
    assert said == {
        'FailedMount: MountVolume.SetUp failed for volume "cfg" : configmap "cfg" not found (again)': "j-0"
    }
    assert not starting.creating(running)
    assert not starting.creating(pod("j-2", node=None))  # not placed: the scheduler's to explain


def test_create_failure_is_the_newest_event_of_this_worker_job_only() -> None:
    worker = {"metadata": {"name": "j", "uid": "w1"}}
    events = [
        {"involvedObject": {"uid": "w1"}, "reason": "FailedCreate", "lastTimestamp": "2026-11-27T00:00:01Z",
         "message": "Error creating: pods \"j-1-abc\" is forbidden: exceeded quota: pods, requested: pods=1"},
        {"involvedObject": {"uid": "w0"}, "reason": "FailedCreate", "message": "an earlier attempt's"},
        {"involvedObject": {"uid": "w1"}, "reason": "SuccessfulCreate", "message": "Created pod: j-0"},
    ]  # fmt: skip
    got = starting.create_failure(worker, events)
    assert (
        got == 'job j: Error creating: pods "j-1-abc" is forbidden: exceeded quota: pods, requested: pods=1'
    )
    assert starting.create_failure(worker, events[1:]) is None


def test_kueue_hold_quotes_quota_reserved_then_admitted() -> None:
    def workload(name: str, **conds: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name},
            "status": {
                "conditions": [{"type": t, "status": "False", "message": m} for t, m in conds.items()]
            },
        }

    quota = "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor gpu"
    assert starting.kueue_hold([workload("w", Admitted="waiting", QuotaReserved=quota)]) == (
        f"Kueue workload w: {quota}"
    )
    assert (
        starting.kueue_hold([workload("w", Admitted="checks pending")]) == "Kueue workload w: checks pending"
    )
    assert starting.kueue_hold([workload("w")]) is None


def test_a_held_growth_is_all_that_is_missing_only_when_every_missing_worker_is_gated() -> None:
    gated = pod("j-2", node=None)
    gated["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/elastic-job"}]
    running = [pod("j-0", phase="Running"), pod("j-1", phase="Running")]
    words = "Kueue workload w: insufficient unused quota"
    held = Evidence(pods=[*running, gated], kueue_growth=words)
    assert starting.held_growth(held, ready=2, nodes=3) == words
    assert starting.held_growth(held, ready=1, nodes=3) is None  # a running rank is not ready too
    other_gate = pod("j-2", node=None)
    other_gate["spec"]["schedulingGates"] = [{"name": "example.com/other"}]
    assert starting.held_growth(Evidence(pods=[*running, other_gate], kueue_growth=words), 2, 3) is None
    assert starting.held_growth(Evidence(pods=[*running, gated]), 2, 3) is None  # Kueue said nothing
    assert blocked(held) is None  # a held growth blocks no worker that should run
