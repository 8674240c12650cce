"""The launch against real torchruns, and the managed etcd against a real etcd 3.5 (SPEC §3).

No control plane: what runs here is what a worker container and the managed etcd's container
would run, taken from the builders' manifests and expanded as the kubelet does (`$(VAR)` from the
container's env; the completion-index annotation set to the node's rank).

The torchruns (installed by hack/testbed/torchrun-versions.sh, which hack/test.sh runs):
- torch 1.13.1, Debian bookworm's `python3-torch` (CPU only) with `python3-etcd`: the whole
  torchrun, run by /usr/bin/python3. Its parser knows only underscore spellings — the hyphenated
  launch this controller used to emit fails there with "unrecognized arguments: --nproc-per-node".
  `test_a_real_launch_*` run it end to end: argv exactly as built, except that the Service host
  in the rendezvous endpoint (`<job>-etcd`, `<job>-0.<job>`) becomes 127.0.0.1 on a free port,
  plus `PET_REDIRECTS=1`/`PET_TEE=1`: that package's `Std.from_str` cannot read the default `0`
  under Python 3.11 (its IntFlag iteration skips the zero member; fixed upstream in torch 2.0),
  so it cannot launch anything with the defaults — a packaging defect, not ours.
- torch 2.15.0 (current): the parser module of its macOS arm64 wheel, the smallest wheel there
  is (a Linux wheel is ~900 MB). `torch/distributed/run.py` and `torch/distributed/argparse_util.py`
  are loaded as they are, with the torch modules run.py imports for other purposes (logging specs,
  the launcher, NUMA binding, rendezvous config parsing) replaced by inert stubs: the argument
  parser and `parse_min_max_nnodes`/`determine_local_world_size` run unmodified; nothing compiled
  is loaded. A stand-in for torch 2.15's torchrun: its test is listed under it in the run's summary.
The etcd is hack/testbed/build-etcd-v2.sh's, built from the Go module proxy at ETCD_V2_VERSION,
the tag of the managed etcd's default image. A missing tool fails these tests, never skips them.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from summary_notes import TORCH_PARSER
from testbed import REPO, pins, wait_until

from controller.api import TorchrunJob, TorchrunQueue, resolve_topology
from controller.torchrunjob.manifests.etcd import DATA_DIR, READY_PATH, build_etcd_pod
from controller.torchrunjob.manifests.launch import parse_command
from controller.torchrunjob.manifests.worker import build_worker_job

TORCHRUNS = REPO / "hack" / "testbed" / "torchrun-versions.sh"
ETCD_V2 = REPO / "hack" / "testbed" / "build-etcd-v2.sh"
UID = "6c1f6a43-2a51-4ef8-9d6e-1d2b3c4d5e6f"


def run_script(script: Path) -> str:
    proc = subprocess.run([str(script)], capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        pytest.fail(f"{script.name} failed (hack/test.sh runs it): {proc.stderr.strip()[-2000:]}")
    return proc.stdout


@pytest.fixture(scope="module")
def torchruns() -> dict[str, str]:
    found = dict(line.split("=", 1) for line in run_script(TORCHRUNS).split())
    if not (Path(found["TORCH_PARSER_DIR"]) / ".done").exists():
        pytest.fail(f"torch parser missing in {found['TORCH_PARSER_DIR']}: run {TORCHRUNS}")
    return found


@pytest.fixture(scope="module")
def etcd_binary() -> Path:
    path = Path(run_script(ETCD_V2).strip())
    if not os.access(path, os.X_OK):
        pytest.fail(f"etcd 3.5 not built at {path}: run {ETCD_V2}")
    return path


# -- what the builders produce, expanded like the kubelet ------------------------------------------


def queue(**node: Any) -> TorchrunQueue:
    spec = {"nodeResources": node or {"gpus": 8, "cpus": "96"}, "image": "pytorch/pytorch:2.0.1"}
    return TorchrunQueue.from_json({"metadata": {"name": "q"}, "spec": spec})


def job(name: str, command: str, **spec: Any) -> TorchrunJob:
    body = {"jobQueue": "q", "numNodes": 2, "command": command, "workspace": {"source": "none"}, **spec}
    return TorchrunJob.from_json({"metadata": {"name": name, "namespace": "ns", "uid": UID}, "spec": body})


@dataclass(frozen=True)
class Launch:
    """One node's torchrun: argv after `torchrun`, and the container's environment."""

    argv: list[str]
    env: dict[str, str]


_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)|\$\$")


def expand(value: str, env: dict[str, str]) -> str:
    """The kubelet's `$(VAR)` expansion of args (`$$` escapes a `$`; unknown names stay)."""
    return _REF.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), value)


def launch_of(j: TorchrunJob, q: TorchrunQueue, rank: int) -> Launch:
    topo = resolve_topology(j.spec, q.spec.node_resources)
    manifest = build_worker_job(j, q, topo, parse_command(j.spec.command))
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["/bin/sh", "/opt/torchrun/launch", "torchrun"]  # launch execs torchrun
    env: dict[str, str] = {}
    for var in container["env"]:
        if "value" in var:
            env[var["name"]] = expand(var["value"], env)
        else:  # the one fieldRef: the Indexed Job's completion index annotation
            assert "job-completion-index" in var["valueFrom"]["fieldRef"]["fieldPath"], var
            env[var["name"]] = str(rank)
    return Launch([expand(a, env) for a in container["args"]], env)


@dataclass(frozen=True)
class Case:
    """A job, the node rank to launch, and what torchrun must make of it."""

    job: TorchrunJob
    queue: TorchrunQueue
    rank: int
    want: dict[str, Any]


CASES = {
    "c10d-module": Case(
        job("train", "PYTHONHASHSEED=0 python -u -m pkg.train --lr 1e-3 --name 'my run'"),
        queue(),
        1,
        {
            "nnodes": [2, 2],
            "nproc_per_node": 8,
            "node_rank": 1,
            "rdzv_backend": "c10d",
            "rdzv_endpoint": "train-0.train.ns.svc.cluster.local:29400",
            "rdzv_id": UID,
            "max_restarts": 0,
            "module": True,
            "no_python": False,
            "training_script": "pkg.train",
            "training_script_args": ["--lr", "1e-3", "--name", "my run"],
        },
    ),
    "managed-etcd-elastic-no-python": Case(
        job(
            "vit",
            "bash run.sh --pattern '$(HOME)'",
            numNodes=2,
            elastic={"minNodes": 1, "maxNodes": 4},
            distributed={"rdzvBackend": "etcd-v2", "maxRestarts": 3},
        ),
        queue(),
        0,
        {
            "nnodes": [1, 4],
            "nproc_per_node": 8,
            "node_rank": 0,
            "rdzv_backend": "etcd-v2",
            "rdzv_endpoint": "vit-etcd:2379",
            "rdzv_id": UID,
            "max_restarts": 3,
            "module": False,
            "no_python": True,
            "training_script": "bash",
            "training_script_args": ["run.sh", "--pattern", "$(HOME)"],
        },
    ),
    "cpu-only": Case(
        job("cpu", "python train.py --epochs 1", numNodes=3, distributed={"backend": "gloo"}),
        queue(gpus=0, cpus="4"),
        2,
        {
            "nnodes": [3, 3],
            "nproc_per_node": 4,
            "node_rank": 2,
            "rdzv_backend": "c10d",
            "rdzv_endpoint": "cpu-0.cpu.ns.svc.cluster.local:29400",
            "rdzv_id": UID,
            "max_restarts": 0,
            "module": False,
            "no_python": False,
            "training_script": "train.py",
            "training_script_args": ["--epochs", "1"],
        },
    ),
}

# -- the two parsers -----------------------------------------------------------------------------

# Debian's torch 1.13.1: the real module, the real `config_from_args` after the parser
PARSE_1_13 = r"""
import json, sys
from torch.distributed import run
args = run.parse_args(json.loads(sys.argv[1]))
config, cmd, cmd_args = run.config_from_args(args)
out = {k: getattr(args, k) for k in json.loads(sys.argv[2])}
out["nnodes"] = [config.min_nodes, config.max_nodes]
out["nproc_per_node"] = config.nproc_per_node
out["rdzv_id"] = config.run_id
out["config"] = {"backend": config.rdzv_backend, "endpoint": config.rdzv_endpoint,
                 "max_restarts": config.max_restarts, "cmd": cmd, "cmd_args": cmd_args}
print(json.dumps(out))
"""

# torch 2.15.0: run.py and argparse_util.py as shipped, unrelated torch imports stubbed
PARSE_CURRENT = r"""
import enum, importlib.util, json, logging, sys, types
from pathlib import Path
root = Path(sys.argv[3])

def stub(name, **attrs):
    module = types.ModuleType(name)
    module.__path__ = []
    module.__dict__.update(attrs)
    sys.modules[name] = module

for name in ("torch", "torch.distributed", "torch.distributed.elastic",
             "torch.distributed.elastic.rendezvous", "torch.distributed.launcher", "torch.numa",
             "torch.utils"):
    stub(name)
stub("torch.distributed.elastic.multiprocessing", DefaultLogsSpecs=object, LogsSpecs=object, Std=object)
stub("torch.distributed.elastic.multiprocessing.errors", record=lambda fn: fn)
stub("torch.distributed.elastic.rendezvous.utils", _parse_rendezvous_config=None)
stub("torch.distributed.elastic.utils", macros=None)
stub("torch.distributed.elastic.utils.logging", get_logger=logging.getLogger)
stub("torch.distributed.launcher.api", elastic_launch=None, LaunchConfig=None)
stub("torch.numa.binding", AffinityMode=enum.Enum("AffinityMode", {"NODE": "node"}), NumaOptions=None)
stub("torch.utils.backend_registration", _get_custom_mod_func=None)

def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

load("torch.distributed.argparse_util", root / "torch/distributed/argparse_util.py")
run = load("torch.distributed.run", root / "torch/distributed/run.py")
args = run.parse_args(json.loads(sys.argv[1]))
out = {k: getattr(args, k) for k in json.loads(sys.argv[2])}
out["nnodes"] = list(run.parse_min_max_nnodes(args.nnodes))
out["nproc_per_node"] = run.determine_local_world_size(args.nproc_per_node)
print(json.dumps(out))
"""

FIELDS = [
    "node_rank",
    "rdzv_backend",
    "rdzv_endpoint",
    "rdzv_id",
    "max_restarts",
    "module",
    "no_python",
    "training_script",
    "training_script_args",
]


def parse(python: str, script: str, launch: Launch, *extra: str) -> subprocess.CompletedProcess[str]:
    """Run a parser script in a fresh interpreter whose environment is the container's."""
    env = {**launch.env, "PATH": "/usr/bin:/bin"}
    argv = [python, "-c", script, json.dumps(launch.argv), json.dumps(FIELDS), *extra]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("name", list(CASES))
def test_torch_1_13_parses_the_exact_launch(torchruns: dict[str, str], name: str) -> None:
    case = CASES[name]
    launch = launch_of(case.job, case.queue, case.rank)
    proc = parse(torchruns["DEBIAN_PYTHON"], PARSE_1_13, launch)
    assert proc.returncode == 0, f"torch {torchruns['DEBIAN_TORCH']} refused {launch.argv}: {proc.stderr}"
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    config = got.pop("config")
    assert got == case.want
    assert (config["backend"], config["endpoint"]) == (case.want["rdzv_backend"], case.want["rdzv_endpoint"])
    assert config["max_restarts"] == case.want["max_restarts"]
    assert config["cmd_args"][-len(case.want["training_script_args"]) :] == case.want["training_script_args"]


@pytest.mark.stand_in(TORCH_PARSER)
@pytest.mark.parametrize("name", list(CASES))
def test_current_torch_parses_the_exact_launch(torchruns: dict[str, str], name: str) -> None:
    case = CASES[name]
    launch = launch_of(case.job, case.queue, case.rank)
    proc = parse(sys.executable, PARSE_CURRENT, launch, torchruns["TORCH_PARSER_DIR"])
    version = (Path(torchruns["TORCH_PARSER_DIR"]) / "SOURCE").read_text().split()[0]
    assert proc.returncode == 0, f"{version} refused {launch.argv}: {proc.stderr}"
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == case.want


def launcher_flags(argv: list[str]) -> list[str]:
    """The leading `--name=value` launcher flags (before `-m`, `--no_python` and the program)."""
    n = 0
    while n < len(argv) and argv[n].startswith("--") and "=" in argv[n]:
        n += 1
    return argv[:n]


def test_the_pet_variables_alone_give_the_same_launch(torchruns: dict[str, str]) -> None:
    """Every launcher setting with a value is also in the PET_* variables every torchrun reads:
    with only `-m` and the program on the command line, torch 1.13.1 parses the same launch."""
    case = CASES["c10d-module"]
    full = launch_of(case.job, case.queue, case.rank)
    program_only = Launch(full.argv[len(launcher_flags(full.argv)) :], full.env)
    proc = parse(torchruns["DEBIAN_PYTHON"], PARSE_1_13, program_only)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    got.pop("config")
    assert got == case.want


def test_torch_1_13_refuses_the_hyphenated_spelling(torchruns: dict[str, str]) -> None:
    """Why the launch uses underscores: what the controller emitted before, refused by 1.13.1."""
    case = CASES["c10d-module"]
    launch = launch_of(case.job, case.queue, case.rank)
    flags = launcher_flags(launch.argv)
    hyphenated = [f.split("=", 1)[0].replace("_", "-") + "=" + f.split("=", 1)[1] for f in flags]
    hyphenated += launch.argv[len(flags) :]
    assert "--nproc-per-node=8" in hyphenated
    proc = parse(torchruns["DEBIAN_PYTHON"], PARSE_1_13, Launch(hyphenated, launch.env))
    assert proc.returncode != 0 and "unrecognized arguments: --nproc-per-node=8" in proc.stderr


# -- real launches: torchrun 1.13.1, gloo on CPU, c10d and the managed etcd -------------------------


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def http(url: str, method: str = "GET") -> tuple[int, Any]:
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")
    except urllib.error.URLError:
        return 0, None  # not listening (yet)


@pytest.fixture
def managed_etcd(etcd_binary: Path, tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """The managed etcd's container, as built for job `cpu`, as a process on loopback: its exact
    flags, with the listen/advertise addresses moved to free loopback ports and the data dir to a
    temporary one. Yields its client endpoint and the flags it ran with."""
    j = job("cpu", "python train.py", distributed={"rdzvBackend": "etcd-v2"})
    (container,) = build_etcd_pod(j, queue(gpus=0, cpus="2"))["spec"]["containers"]
    client, peer = free_ports(2)
    moves = {
        "0.0.0.0:2379": f"127.0.0.1:{client}",
        "cpu-etcd:2379": f"127.0.0.1:{client}",
        "127.0.0.1:2380": f"127.0.0.1:{peer}",
        DATA_DIR: str(tmp_path / "etcd"),
    }
    args = []
    for flag in container["args"]:
        for old, new in moves.items():
            flag = flag.replace(old, new)  # noqa: PLW2901 - the flag, moved to loopback
        args.append(flag)
    log = (tmp_path / "etcd.log").open("w")
    proc = subprocess.Popen([str(etcd_binary), *args], stdout=log, stderr=subprocess.STDOUT)
    endpoint = f"127.0.0.1:{client}"
    try:
        # the pod's readiness probe: Ready only when the v2 API answers
        wait_until(
            lambda: http(f"http://{endpoint}{READY_PATH}")[0] == 200, 30, message="etcd 3.5 serving /v2/keys"
        )
        yield endpoint, args
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


TRAIN = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(t)
if dist.get_rank() == 0:
    with open("result.json", "w") as f:
        f.write('{"world": %d, "sum": %s, "run_id": "%s"}' % (dist.get_world_size(), t.item(),
                os.environ["TORCHELASTIC_RUN_ID"]))
"""


def real_launch(python: str, launch: Launch, cwd: Path, host: str, loopback: str) -> dict[str, Any]:
    """Run `torchrun` (1.13.1) with the launch, its rendezvous host moved to `loopback`."""
    (cwd / "train.py").write_text(TRAIN)
    argv = [a.replace(host, loopback) for a in launch.argv]
    env = {**launch.env, "PET_RDZV_ENDPOINT": launch.env["PET_RDZV_ENDPOINT"].replace(host, loopback)}
    env.update(
        {"PATH": "/usr/bin:/bin", "PET_REDIRECTS": "1", "PET_TEE": "1", "PET_LOG_DIR": str(cwd / "logs")}
    )
    started = time.monotonic()
    proc = subprocess.run(
        [python, "-m", "torch.distributed.run", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, f"torchrun {argv} failed:\n{proc.stderr[-3000:]}"
    result: dict[str, Any] = json.loads((cwd / "result.json").read_text())
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def test_a_real_launch_rendezvous_on_the_managed_etcd(
    torchruns: dict[str, str], managed_etcd: tuple[str, list[str]], tmp_path: Path
) -> None:
    """A CPU-only etcd-v2 job (2 CPUs → 2 processes) launched by torchrun 1.13.1 exactly as built,
    rendezvousing on the managed etcd's etcd 3.5 through its v2 API: the processes form one gloo
    group, and torchrun's state sits at its key (/torch/elastic/rendezvous/<run id>)."""
    endpoint, flags = managed_etcd
    assert "--enable-v2=true" in flags
    j = job("cpu", "python train.py", numNodes=1, distributed={"rdzvBackend": "etcd-v2", "backend": "gloo"})
    launch = launch_of(j, queue(gpus=0, cpus="2"), 0)
    assert "--rdzv_endpoint=cpu-etcd:2379" in launch.argv  # the Service the test moves to loopback
    result = real_launch(torchruns["DEBIAN_PYTHON"], launch, tmp_path, "cpu-etcd:2379", endpoint)
    assert (result["world"], result["sum"], result["run_id"]) == (2, 3.0, UID)
    status, body = http(f"http://{endpoint}/v2/keys/torch/elastic/rendezvous/{UID}")
    assert status == 200 and body["node"]["key"] == f"/torch/elastic/rendezvous/{UID}"
    status, body = http(f"http://{endpoint}/v2/keys/torch/elastic/store")
    assert status == 200 and body["node"]["dir"] is True


def test_a_real_launch_with_c10d(torchruns: dict[str, str], tmp_path: Path) -> None:
    """The default rendezvous: node 0's torchrun hosts the c10d store at the endpoint it is given."""
    j = job("cpu", "python train.py", numNodes=1, distributed={"backend": "gloo"})
    launch = launch_of(j, queue(gpus=0, cpus="2"), 0)
    (port,) = free_ports(1)
    result = real_launch(
        torchruns["DEBIAN_PYTHON"],
        launch,
        tmp_path,
        "cpu-0.cpu.ns.svc.cluster.local:29400",
        f"127.0.0.1:{port}",
    )
    assert (result["world"], result["sum"], result["run_id"]) == (2, 3.0, UID)


def test_an_etcd_36_image_fails_loudly(etcd_binary: Path, tmp_path: Path) -> None:
    """A queue whose etcdImage is etcd 3.6 (no v2 API) must not give a silently useless etcd: with
    the managed etcd's flags the control plane's own etcd 3.6 refuses to start (the pod then crash
    loops and the job says EtcdFailing, naming spec.etcdImage)."""
    etcd36 = etcd_binary.parent.parent / f"etcd-{pins()['ETCD_VERSION']}" / "etcd"  # build-controlplane.sh's
    assert etcd36.exists(), f"{etcd36}: run hack/build-controlplane.sh"
    (container,) = build_etcd_pod(job("j", "python t.py"), queue())["spec"]["containers"]
    args = [a.replace(DATA_DIR, str(tmp_path / "data")) for a in container["args"]]
    proc = subprocess.run([str(etcd36), *args], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode != 0 and "flag provided but not defined: -enable-v2" in proc.stderr, proc.stderr[
        -500:
    ]
    assert not (tmp_path / "data").exists()
