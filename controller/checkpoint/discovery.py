"""Which checkpoints exist under a job's root and which are complete (docs/checkpoints.md).

`scan(root)` lists the entries directly under `root` — it never descends further than a kind's
own layout needs, never follows a symbolic link (but one: below) and never reads outside `root`.
An **entry** is, with a name not starting with `.` (writers' temporary names, our markers):
- a real directory (not a symlink, whatever it points at);
- a regular file named `*.pt`, `*.pth`, `*.ckpt`, `*.bin` or `*.safetensors` (torch.save,
  Lightning, safetensors) that has a step in its name, or is a framework's own step-less name
  (`OWN_STEPLESS`: Lightning's `last.ckpt`/`last-vN.ckpt`, nanoGPT's overwritten `ckpt.pt`), or
  is a step-less sibling of a stepped file of the same family (`ckpt.pt` beside `ckpt_500.pt`,
  `model.safetensors` beside `model-step-10.safetensors`; `family_roots`) — so a user's
  `base_model.safetensors` is never one;
- Lightning's `save_last="link"`: a symlink with an `OWN_STEPLESS` name whose target is one plain
  name in the same directory (what Lightning writes: a relative link) naming an entry; it is as
  complete as its target. No other link counts.

Each kind has a completeness check that reads a few bytes (or one bounded pickle header), from the
frameworks' save order (docs/checkpoints.md names the versions read):
- our marker `.torchrun_complete` (`torchrun_checkpoint.mark_complete`), in any directory;
- a torch.save file (zip, torch >= 1.6): its end-of-central-directory record (and torch's zip64
  record and locator) in place at the end and consistent with where the central directory starts,
  which is written last; a legacy (pre-zip) torch.save file (it ends in raw tensor bytes) when it
  ends exactly where its last storage does: its pickles' storage ids give each storage's type and
  element count, and each storage's bytes are preceded by that count (`_legacy_complete`; the
  pickles are listed by `pickletools`, never run); anything else in a torch suffix is not complete;
- a safetensors file: 8 + its header length + the largest `data_offsets` end equals its size;
- DCP: `.metadata` (written last by rank 0 after every rank's data);
- a Hugging Face Trainer `checkpoint-<step>/`: `trainer_state.json` (written last);
- Lightning's sharded `<name>.ckpt/` directory: DCP's `.metadata` and then Lightning's `meta.pt`,
  complete (written after the DCP save);
- DeepSpeed (a directory holding `mp_rank_00_model_states.pt`, or ZeRO-3's
  `zero_pp_rank_0_mp_rank_00_model_states.pt`): the root's `latest` names it, or names a
  stepped directory above it (DeepSpeed's save begins with a barrier, so an older tag was finished
  by every rank), and every file its world should hold is there and complete — the world (data-
  and model-parallel sizes) read from its `mp_rank_00` model states file's pickle;
- Megatron `iter_<step>/`: the root's `latest_checkpointed_iteration.txt` holds its step or a
  later one, and it holds a distributed checkpoint (`.metadata` and `metadata.json`) or
  `mp_rank_*/model_optim_rng.pt`, every one complete;
- accelerate `checkpoint_<n>/` (`save_state`; no `.metadata`): `random_states_0.pkl` (written
  after the model, optimizer, scheduler and sampler) and every torch or safetensors file in it
  complete.
Anything else is incomplete and never chosen.

The **step** comes from the name (`step_of`, a file's without its suffix): `step-1200`,
`step_1200`, `step1200`, `checkpoint-1200` (HF), `checkpoint_3` (accelerate's save counter),
`global_step1200` (DeepSpeed), `iter_0001200` (Megatron), `ckpt_1200`, `epoch=3-step=1200`
(Lightning), `…-step=1200-consumed_samples=…` (NeMo), `…-step=12-v1` (Lightning's version
suffix) — one of those words at the start or after `-`/`_`, optionally `-`, `_` or `=`, digits,
then the end, `-vN` or another Lightning `-key=` field. Its time is the mtime of the file that
made it complete (a file entry's own; a link's own; a DeepSpeed or Megatron directory's own).
An incomplete entry is **started by us** (`Entry.ours`) when its name is exactly `step-<step>` and
it holds our `.torchrun_started` as a regular file (`torchrun_checkpoint.path_for` writes it when
it hands the directory out): the only incomplete entries retention may remove.
A root that does not exist or is not a directory has no entries. Entries vanishing while they are
scanned are simply missing from the result.

Standard library only and importing nothing else: `prepare` copies this very module to every
worker's `/opt/torchrun/python/torchrun_checkpoint_discovery.py`, where `torchrun_checkpoint`
uses it after torchrun restarted the workers in place (one home for the rules).

`latest(entries)` is the newest complete entry: by step when every complete entry has one, else
by time (a name without a step cannot be compared with one that has one); ties by time, then name.
"""

from __future__ import annotations

import io
import json
import os
import pickletools
import re
import stat
import struct
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

MARKER = ".torchrun_complete"  # what torchrun_checkpoint.mark_complete writes
STARTED = ".torchrun_started"  # what torchrun_checkpoint.path_for writes
DCP_METADATA = ".metadata"
HF_STATE = "trainer_state.json"
LIGHTNING_META = "meta.pt"  # lightning.fabric.utilities.load._METADATA_FILENAME
DEEPSPEED_LATEST = "latest"
MEGATRON_TRACKER = "latest_checkpointed_iteration.txt"
ACCELERATE_RNG = "random_states_0.pkl"
DEEPSPEED_FIRST = ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt")

DCP = "dcp"
HF = "hf"
MARKED = "marker"
TORCH = "torch"  # a torch.save file
SAFETENSORS = "safetensors"
LIGHTNING = "lightning"  # a Lightning `.ckpt` file or sharded directory
DEEPSPEED = "deepspeed"
MEGATRON = "megatron"
ACCELERATE = "accelerate"

FILE_SUFFIXES = (".safetensors", ".ckpt", ".pth", ".pt", ".bin")
OWN_STEPLESS = re.compile(r"(?:last(?:-v[0-9]{1,9})?\.ckpt|ckpt\.pt)\Z")
PICKLE_LIMIT = 16 * 1024 * 1024  # bytes of a torch.save file's pickle read for a value in it
SAFETENSORS_HEADER_LIMIT = 100 * 1024 * 1024  # the format's own limit

_WORDS = r"(?:global_step|step|checkpoint|ckpt|iteration|iter)"
_STEP = re.compile(
    rf"(?:^|[-_]){_WORDS}[-_=]?([0-9]{{1,18}})(?=\Z|-v[0-9]{{1,9}}\Z|-[A-Za-z_][A-Za-z0-9_]*=)"
)
_HF = re.compile(r"checkpoint-[0-9]{1,18}\Z")
_ACCELERATE = re.compile(r"checkpoint_[0-9]{1,18}\Z")
_MEGATRON = re.compile(r"iter_[0-9]{1,18}\Z")
_ZIP_MAGIC = b"PK\x03\x04"
_LEGACY_MAGIC = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19."  # pickle of torch's legacy magic number


def step_of(name: str) -> int | None:
    """The step in a checkpoint's name (a file's without its suffix), or None (module doc)."""
    match = _STEP.search(name)
    return int(match.group(1)) if match else None


def is_hf_name(name: str) -> bool:
    """A Hugging Face Trainer checkpoint's name: `checkpoint-<step>`."""
    return _HF.match(name) is not None


def stem_of(name: str) -> str | None:
    """A file entry's name without its suffix, or None when the suffix is not a checkpoint's."""
    for suffix in FILE_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return None


def family_roots(name: str) -> set[str]:
    """The step-less names of the same family as stepped file `name`: its text before the step
    token (`model` of `model-step-10.safetensors`) and before the digits (`ckpt` of
    `ckpt_500.pt`), with its suffix."""
    stem = stem_of(name)
    match = _STEP.search(stem) if stem is not None else None
    if stem is None or match is None:
        return set()
    suffix = name[len(stem) :]
    roots = {stem[: match.start()], stem[: match.start(1)].rstrip("-_=")}
    return {root + suffix for root in roots if root and root[-1] not in "-_="}


@dataclass(frozen=True)
class Entry:
    """One directory or checkpoint file directly under the root."""

    name: str
    path: Path
    complete: bool
    kind: str | None  # DCP, HF, MARKED, ...; None when incomplete
    step: int | None
    time: float  # seconds since the epoch
    ours: bool = False  # incomplete, and started by torchrun_checkpoint.path_for (module doc)
    file: bool = False  # a file (or Lightning's link to one), not a directory
    note: str = ""  # why an incomplete entry is, when it is worth saying


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def _regular_mtime(directory: str, name: str) -> float | None:
    """The mtime of `directory/name` when it is a regular file (links not followed), else None."""
    st = _lstat(os.path.join(directory, name))
    return st.st_mtime if st is not None and stat.S_ISREG(st.st_mode) else None


def _read_at(fd: int, size: int, offset: int) -> bytes:
    return os.pread(fd, size, offset) if offset >= 0 else b""


def _zip_complete(fd: int, size: int) -> bool:
    """A zip (torch.save) whose end records are in place and agree with its central directory."""
    if size < 26 or _read_at(fd, 4, 0) != _ZIP_MAGIC:
        return False
    eocd = size - 22  # torch writes no archive comment
    tail = _read_at(fd, 22, eocd)
    if len(tail) != 22:
        return False
    sig, disk, cd_disk, n_disk, n_total, cd_size, cd_offset, comment = struct.unpack("<IHHHHIIH", tail)
    if sig != 0x06054B50 or comment != 0 or disk != cd_disk or n_disk != n_total:
        return False
    end = eocd
    locator = _read_at(fd, 20, eocd - 20)
    if len(locator) == 20 and locator[:4] == b"PK\x06\x07":
        (record_at,) = struct.unpack("<Q", locator[8:16])
        record = _read_at(fd, 56, record_at)
        if len(record) != 56 or record[:4] != b"PK\x06\x06" or record_at + 56 != eocd - 20:
            return False
        n_total, cd_size, cd_offset = struct.unpack("<QQQ", record[32:56])
        end = record_at
    return n_total > 0 and cd_offset + cd_size == end and _read_at(fd, 4, cd_offset) == b"PK\x01\x02"


def _safetensors_complete(fd: int, size: int) -> bool:
    head = _read_at(fd, 8, 0)
    if len(head) != 8:
        return False
    (length,) = struct.unpack("<Q", head)
    if length > SAFETENSORS_HEADER_LIMIT or 8 + length > size:
        return False
    try:
        header = json.loads(_read_at(fd, length, 8))
        ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"]
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return False
    return all(isinstance(e, int) for e in ends) and 8 + length + max(ends, default=0) == size


_ELEMENT_SIZES = {
    "Double": 8, "Float": 4, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2, "Char": 1,
    "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16, "QInt8": 1, "QUInt8": 1,
    "QInt32": 4, "QUInt4x2": 1, "QUInt2x4": 1, "Untyped": 1,
}  # fmt: skip
_MARK = object()  # a MARK on the stack of `_legacy_storages`


def _legacy_storages(stream: io.BytesIO) -> dict[str, tuple[str, int]] | None:
    """Run the stack effects of one pickle's opcodes (listed, never executed) to collect its
    persistent ids `('storage', <class torch.<T>Storage>, key, location, numel, view)`: key →
    (T, numel). None when the pickle is not whole or an id is not one of those."""
    stack: list[object] = []
    memo: dict[int, object] = {}
    found: dict[str, tuple[str, int]] = {}
    for op, arg, _ in pickletools.genops(stream):
        name = op.name
        if name in _PUTS or name == "MEMOIZE":
            memo[arg if isinstance(arg, int) else len(memo)] = stack[-1] if stack else None
            continue
        if pickletools.markobject in op.stack_before:
            at = max((i for i, v in enumerate(stack) if v is _MARK), default=-1)
            popped, stack = stack[at + 1 :], stack[: max(at, 0)]
        else:
            count = len(op.stack_before)
            popped, stack = stack[len(stack) - count :], stack[: len(stack) - count]
        if name == "BINPERSID":
            pid = popped[0] if popped else None
            if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage"):
                return None
            kind, key, numel = pid[1], pid[2], pid[4]
            if not (isinstance(kind, str) and isinstance(key, str) and isinstance(numel, int)):
                return None
            found[key] = (kind.rpartition(" ")[2].removesuffix("Storage"), numel)
        if name == "MARK":
            stack.append(_MARK)
        elif name in _GETS:
            stack.append(memo.get(arg) if isinstance(arg, int) else None)
        elif name in ("TUPLE", "TUPLE1", "TUPLE2", "TUPLE3"):
            stack.append(tuple(popped))
        elif op.stack_after:
            stack.append(arg if isinstance(arg, (str, int)) and name not in ("PROTO", "FRAME") else None)
    return found


def _legacy_complete(fd: int, size: int) -> bool:
    """A legacy torch.save file (module doc): its magic, protocol and system pickles, the object's
    pickle (storage ids), the sorted storage keys, then per key its element count (8 bytes, as in
    the id) and its bytes — whole exactly when the file ends where the last storage does. Reads
    the first 64 KiB for the pickles, and up to `PICKLE_LIMIT` only when they are longer."""
    for limit in (64 * 1024, PICKLE_LIMIT):
        head = _read_at(fd, min(size, limit), 0)
        if _legacy_ends_at(fd, head, size):
            return True
        if len(head) == size:
            break
    return False


def _legacy_ends_at(fd: int, head: bytes, size: int) -> bool:
    stream = io.BytesIO(head)
    try:
        for _ in range(3):
            for _op in pickletools.genops(stream):
                pass
        storages = _legacy_storages(stream)
        keys = [arg for _op, arg, _ in pickletools.genops(stream) if isinstance(arg, str)]
    except (ValueError, EOFError, IndexError):
        return False
    if storages is None or sorted(storages) != keys:
        return False
    at = stream.tell()
    for key in keys:
        kind, numel = storages[key]
        if kind not in _ELEMENT_SIZES or _read_at(fd, 8, at) != struct.pack("<q", numel):
            return False
        at += 8 + numel * _ELEMENT_SIZES[kind]
    return at == size


def file_check(path: str) -> tuple[bool, str]:
    """Whether the checkpoint file at `path` (a regular file, links not followed) is complete, and
    what it is when it is not (module doc)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False, "unreadable"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return False, "not a regular file"
        if path.endswith(".safetensors"):
            return (True, "") if _safetensors_complete(fd, st.st_size) else (False, "safetensors: truncated")
        if _zip_complete(fd, st.st_size):
            return True, ""
        head = _read_at(fd, len(_LEGACY_MAGIC), 0)
        if head == _LEGACY_MAGIC:
            if _legacy_complete(fd, st.st_size):
                return True, ""
            return False, "legacy torch.save format: truncated, or a layout this check does not know"
        if head[:4] == _ZIP_MAGIC:
            return False, "torch.save: truncated"
        return False, "not a torch.save file"
    finally:
        os.close(fd)


def _complete_file(directory: str, name: str) -> bool:
    return _regular_mtime(directory, name) is not None and file_check(os.path.join(directory, name))[0]


def pickle_values(path: str, keys: Iterable[str]) -> dict[str, object] | None:
    """The values (strings or ints) that follow each of `keys` first in the pickle of torch.save
    file `path` (its `*/data.pkl`, at most `PICKLE_LIMIT` bytes), read without running it: the
    opcodes are only listed. Keys not found are missing; None when the file cannot be read or is
    not a regular file (a link is not followed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as raw:
            if not stat.S_ISREG(os.fstat(raw.fileno()).st_mode):
                return None
            return _pickle_values_in(raw, keys)
    except OSError:
        return None


def _pickle_values_in(raw: IO[bytes], keys: Iterable[str]) -> dict[str, object] | None:
    try:
        with zipfile.ZipFile(raw) as archive:
            member = next((n for n in archive.namelist() if n.endswith("/data.pkl")), None)
            if member is None:
                return None
            with archive.open(member) as stream:
                data = stream.read(PICKLE_LIMIT + 1)
        return _values_in(data, set(keys)) if len(data) <= PICKLE_LIMIT else None
    except (OSError, ValueError, zipfile.BadZipFile, RuntimeError, EOFError, KeyError):
        return None


_GETS = ("BINGET", "LONG_BINGET", "GET")
_PUTS = ("BINPUT", "LONG_BINPUT", "PUT")


def _values_in(data: bytes, wanted: set[str]) -> dict[str, object]:
    """A dict's `key, value` pair is two consecutive pushes in a pickle (memo writes between them
    aside): the value pushed next after a wanted key, followed through the memo."""
    found: dict[str, object] = {}
    memo: dict[int, object] = {}
    pending: str | None = None
    last: object = None
    for op, arg, _ in pickletools.genops(data):
        if op.name in _PUTS or op.name == "MEMOIZE":
            memo[arg if isinstance(arg, int) else len(memo)] = last
            continue
        value: object = None
        if op.name in _GETS:
            value = memo.get(arg) if isinstance(arg, int) else None
        elif isinstance(arg, (str, int)) and not isinstance(arg, bool) and op.name not in ("PROTO", "FRAME"):
            value = arg
        if pending is not None and value is not None:
            found.setdefault(pending, value)
        pending = value if isinstance(value, str) and value in wanted and value not in found else None
        last = value
        if len(found) == len(wanted):
            break
    return found


def _deepspeed(root: str, path: str, name: str, step: int | None, files: list[str]) -> str:
    """Why DeepSpeed directory `path` is incomplete, or "" when it is complete (module doc)."""
    try:
        fd = os.open(os.path.join(root, DEEPSPEED_LATEST), os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as latest_file:
            tag = latest_file.read(4096).decode("utf-8", "replace").strip()
    except OSError:
        return "DeepSpeed: the root has no `latest`"
    latest_step = step_of(tag)
    if tag != name and (step is None or latest_step is None or step >= latest_step):
        return f"DeepSpeed: `latest` names {tag!r}, not this or a later save"
    zero3 = DEEPSPEED_FIRST[1] in files
    first = DEEPSPEED_FIRST[1] if zero3 else DEEPSPEED_FIRST[0]
    world = pickle_values(os.path.join(path, first), ("dp_world_size", "mp_world_size")) or {}
    dp, mp = world.get("dp_world_size"), world.get("mp_world_size")
    if not (isinstance(dp, int) and isinstance(mp, int) and 0 < dp <= 65536 and 0 < mp <= 65536):
        return f"DeepSpeed: {first} missing, incomplete or without its world sizes"
    expected = []
    optim = any(f.endswith("_optim_states.pt") for f in files)
    prefix = "bf16_" if any(f.startswith("bf16_zero_pp_rank_") for f in files) else ""
    for m in range(mp):
        expected += (
            [f"zero_pp_rank_{d}_mp_rank_{m:02d}_model_states.pt" for d in range(dp)]
            if zero3
            else [f"mp_rank_{m:02d}_model_states.pt"]
        )
        expected += (
            [f"{prefix}zero_pp_rank_{d}_mp_rank_{m:02d}_optim_states.pt" for d in range(dp)] if optim else []
        )
    missing = [f for f in expected if not _complete_file(path, f)]
    return f"DeepSpeed: {len(missing)} of its world's files missing or incomplete" if missing else ""


def _megatron(root: str, path: str, step: int | None, files: list[str]) -> str:
    """Why Megatron directory `path` is incomplete, or "" (module doc)."""
    try:
        fd = os.open(os.path.join(root, MEGATRON_TRACKER), os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as tracker:
            text = tracker.read(64).decode("ascii", "replace").strip()
    except OSError:
        return f"Megatron: the root has no {MEGATRON_TRACKER}"
    if not text.isdigit() or step is None or int(text) < step:
        return f"Megatron: {MEGATRON_TRACKER} holds {text!r}, not this or a later iteration"
    if _regular_mtime(path, DCP_METADATA) is not None and _regular_mtime(path, "metadata.json") is not None:
        return ""
    shards = [os.path.join(path, f) for f in files if f.startswith("mp_rank_")]
    if not all((st := _lstat(shard)) is not None and stat.S_ISDIR(st.st_mode) for shard in shards):
        return "Megatron: an mp_rank_* that is not a real directory"
    if shards and all(_complete_file(shard, "model_optim_rng.pt") for shard in shards):
        return ""
    return "Megatron: no complete distributed checkpoint or mp_rank_*/model_optim_rng.pt"


def _accelerate(path: str, files: list[str]) -> str:
    if not _complete_file(path, ACCELERATE_RNG):
        return f"accelerate: {ACCELERATE_RNG} missing or incomplete"
    weights = [f for f in files if f.endswith((*FILE_SUFFIXES, ".pkl"))]
    return "" if all(_complete_file(path, f) for f in weights) else "accelerate: a file is incomplete"


def _listing(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _directory(root: str, path: str, name: str, step: int | None) -> tuple[str | None, float | None, str]:
    """A directory's kind and completion time when complete, else (None, None, why). Lists the
    directory only when its name or first files say which framework wrote it."""
    if (mtime := _regular_mtime(path, MARKER)) is not None:
        return MARKED, mtime, ""
    if name.endswith(".ckpt"):
        if _regular_mtime(path, DCP_METADATA) is not None and _complete_file(path, LIGHTNING_META):
            return LIGHTNING, _regular_mtime(path, LIGHTNING_META), ""
        return None, None, f"Lightning sharded: no .metadata or no complete {LIGHTNING_META}"
    if any(_regular_mtime(path, f) is not None for f in DEEPSPEED_FIRST):
        why = _deepspeed(root, path, name, step, _listing(path))
        return (None, None, why) if why else (DEEPSPEED, os.lstat(path).st_mtime, "")
    if _MEGATRON.match(name) and _regular_mtime(root, MEGATRON_TRACKER) is not None:
        why = _megatron(root, path, step, _listing(path))
        return (None, None, why) if why else (MEGATRON, os.lstat(path).st_mtime, "")
    dcp = _regular_mtime(path, DCP_METADATA)
    if _ACCELERATE.match(name) and dcp is None:
        why = _accelerate(path, _listing(path))
        return (None, None, why) if why else (ACCELERATE, _regular_mtime(path, ACCELERATE_RNG), "")
    if dcp is not None:
        return DCP, dcp, ""
    if is_hf_name(name) and (mtime := _regular_mtime(path, HF_STATE)) is not None:
        return HF, mtime, ""
    return None, None, ""


def _file_kind(name: str) -> str:
    if name.endswith(".safetensors"):
        return SAFETENSORS
    return LIGHTNING if name.endswith(".ckpt") else TORCH


def entry_at(root: Path, name: str) -> Entry | None:
    """What `root/name` is now (module doc), or None when it is not an entry (or is gone). A file
    with neither a step nor a framework's own name is an entry here; `scan` drops those that are
    not siblings of a stepped file."""
    directory = os.fspath(root)
    path = os.path.join(directory, name)
    st = _lstat(path)
    if st is None or name.startswith("."):
        return None
    if stat.S_ISLNK(st.st_mode):
        return _link_entry(root, name, st)
    if stat.S_ISREG(st.st_mode):
        stem = stem_of(name)
        if stem is None:
            return None
        complete, why = file_check(path)
        kind = _file_kind(name) if complete else None
        return Entry(name, Path(path), complete, kind, step_of(stem), st.st_mtime, file=True, note=why)
    if not stat.S_ISDIR(st.st_mode):
        return None
    step = step_of(name[:-5] if name.endswith(".ckpt") else name)
    kind, mtime, why = _directory(directory, path, name, step)
    if kind is not None and mtime is not None:
        return Entry(name, Path(path), True, kind, step, mtime)
    ours = name == f"step-{step}" and _regular_mtime(path, STARTED) is not None
    return Entry(name, Path(path), False, None, step, st.st_mtime, ours, note=why)


def _link_entry(root: Path, name: str, st: os.stat_result) -> Entry | None:
    """Lightning's `save_last="link"` (module doc): only an own step-less name, only a target that
    is one plain name beside it."""
    if not OWN_STEPLESS.match(name):
        return None
    try:
        target = os.readlink(os.path.join(root, name))
    except OSError:
        return None
    if not target or "/" in target or target.startswith(".") or OWN_STEPLESS.match(target):
        return None
    found = entry_at(root, target)
    if found is None:
        return None
    return Entry(
        name, Path(root, name), found.complete, found.kind, None, st.st_mtime, file=True, note=found.note
    )


def scan(root: Path) -> list[Entry]:
    """The entries directly under `root` (module doc), in no particular order."""
    try:
        with os.scandir(root) as items:
            names = [item.name for item in items]
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = [e for name in names if (e := entry_at(root, name)) is not None]
    siblings: set[str] = set()
    for e in found:
        if e.file and e.step is not None:
            siblings |= family_roots(e.name)
    return [
        e
        for e in found
        if not e.file or e.step is not None or OWN_STEPLESS.match(e.name) or e.name in siblings
    ]


def by_age(entries: Iterable[Entry]) -> list[Entry]:
    """The complete entries, newest first (module doc)."""
    complete = [e for e in entries if e.complete]
    if all(e.step is not None for e in complete):
        return sorted(complete, key=lambda e: (e.step or 0, e.time, e.name), reverse=True)
    return sorted(complete, key=lambda e: (e.time, e.name), reverse=True)


def latest(entries: Sequence[Entry]) -> Entry | None:
    """The newest complete entry, or None when there is none."""
    ordered = by_age(entries)
    return ordered[0] if ordered else None


def still_complete(entry: Entry) -> bool:
    """Whether `entry` is still there and complete (it may vanish between a scan and a start)."""
    again = entry_at(entry.path.parent, entry.name)
    return again is not None and again.complete
