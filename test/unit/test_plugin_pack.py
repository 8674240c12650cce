"""The plugin's packer: ignore rules like git's, secret and size refusals, symlinks, and an
archive whose checksum depends only on the tree — and that the sync program accepts."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from controller.plugin import pack
from controller.plugin.archive import write_archive
from controller.plugin.main import main
from controller.plugin.pack import drop_rule, refusals, scan
from controller.sync import Limits
from controller.sync.upload import receive


def write(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def packed_paths(root: Path) -> set[str]:
    return {e.path for e in scan(root).entries if e.kind != "dir"}


def sha(root: Path) -> str:
    return write_archive(scan(root), io.BytesIO()).sha256


# --- ignore rules -------------------------------------------------------------------------------


def test_nested_ignore_files_with_negations_scope_and_precedence(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            ".gitignore": "*.log\n!keep.log\n/build/\n/only_root.txt\n# a comment\n\n",
            "a.log": "",
            "keep.log": "",
            "only_root.txt": "",
            "train.py": "",
            "build/out.bin": "",
            "sub/.gitignore": "!debug.log\n*.tmp\n/anchored.txt\n",
            "sub/.torchrunignore": "!wanted.tmp\nscratch/\n",
            "sub/debug.log": "",
            "sub/other.log": "",
            "sub/x.tmp": "",
            "sub/wanted.tmp": "",
            "sub/anchored.txt": "",
            "sub/only_root.txt": "",
            "sub/deeper/anchored.txt": "",
            "sub/scratch/notes.md": "",
            "sub/deeper/.torchrunignore": "*\n!*.py\n!*/\n",
            "sub/deeper/model.py": "",
            "sub/deeper/weights.bin": "",
        },
    )
    assert packed_paths(tmp_path) == {
        ".gitignore",
        "keep.log",
        "train.py",
        "sub/.gitignore",
        "sub/.torchrunignore",
        "sub/debug.log",
        "sub/wanted.tmp",
        "sub/only_root.txt",
        "sub/deeper/model.py",
    }
    rules = {path: str(rule) for path, rule in scan(tmp_path).ignored}
    assert rules["a.log"] == ".gitignore:1: *.log"
    assert rules["build"] == ".gitignore:3: /build/"
    assert rules["sub/other.log"] == ".gitignore:1: *.log"  # a parent's rule reaches down
    assert rules["sub/x.tmp"] == "sub/.gitignore:2: *.tmp"
    assert rules["sub/anchored.txt"] == "sub/.gitignore:3: /anchored.txt"
    assert rules["sub/scratch"] == "sub/.torchrunignore:2: scratch/"
    assert rules["sub/deeper/weights.bin"] == "sub/deeper/.torchrunignore:1: *"
    # `/anchored.txt` is anchored to sub/: sub/deeper/anchored.txt falls to deeper's `*` instead
    assert rules["sub/deeper/anchored.txt"] == "sub/deeper/.torchrunignore:1: *"


def test_a_dropped_directory_cannot_be_reincluded_like_git(tmp_path: Path) -> None:
    write(tmp_path, {".gitignore": "data/\n!data/small.csv\n", "data/small.csv": "", "x.py": ""})
    assert packed_paths(tmp_path) == {".gitignore", "x.py"}


def test_defaults_drop_git_caches_and_venvs_and_a_project_can_reinclude(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            ".git/HEAD": "ref",
            "pkg/__pycache__/m.cpython-311.pyc": "",
            "pkg/m.pyc": "",
            "pkg/m.py": "",
            ".venv/bin/python": "",
            "venv/lib/site.py": "",
            "tools/venv/x": "",
        },
    )
    assert packed_paths(tmp_path) == {"pkg/m.py"}
    assert dict((p, r.source) for p, r in scan(tmp_path).ignored)["pkg/m.pyc"] == "built-in defaults"
    write(tmp_path, {".torchrunignore": "!venv/\n!.git/\n"})
    # the defaults rank below the project's files; .git is never packed, whatever the rules say
    assert packed_paths(tmp_path) == {".torchrunignore", "pkg/m.py", "venv/lib/site.py", "tools/venv/x"}


# --- refusals -------------------------------------------------------------------------------------

SECRETS = {
    "id_rsa": "x",
    "deploy/id_ed25519": "x",
    ".env": "TOKEN=1",
    ".env.production": "TOKEN=1",
    "home/.aws/credentials": "[default]",
    "certs/server.pem": "x",
    "notes.txt": "some text\n-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n",
    "sa.json": '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\nabc"}',
    "cluster.yaml": "apiVersion: v1\nkind: Config\nclusters: []\nusers: []\n",
    "admin.kubeconfig": "x",
}


def test_secret_looking_files_are_refused_by_name_and_content_unless_forced(tmp_path: Path) -> None:
    write(tmp_path, {**SECRETS, "train.py": "print(1)", ".env.example": "TOKEN=", "id_rsa.pub": "ssh-rsa"})
    tree = scan(tmp_path)
    assert {p for p, _ in tree.secrets} == set(SECRETS)
    [problem] = refusals(tree)
    assert problem.startswith("files that look like secrets (--force sends them anyway)")
    assert "notes.txt: contains a private key" in problem
    assert "cluster.yaml: a kubeconfig (kind: Config)" in problem
    assert "home/.aws/credentials: AWS credentials   (drop it with `/home/` in .torchrunignore)" in problem
    assert refusals(tree, force=True) == []


def test_secrets_dropped_by_an_ignore_rule_are_not_refused(tmp_path: Path) -> None:
    write(tmp_path, {".env": "TOKEN=1", "id_rsa": "x", "train.py": "", ".torchrunignore": ".env\nid_rsa\n"})
    assert refusals(scan(tmp_path)) == []


def test_size_limit_lists_the_largest_files_and_the_rule_to_drop_each(tmp_path: Path) -> None:
    write(tmp_path, {"data/big.bin": b"x" * 3000, "ckpt.pt": b"x" * 2000, "train.py": b"x" * 10})
    tree = scan(tmp_path)
    [problem] = refusals(tree, limit=4000)
    assert "holds 4.9 KB in 3 files, over the 3.9 KB limit (--force sends it anyway)" in problem
    lines = problem.splitlines()[1:]
    assert [line.split()[2] for line in lines] == ["data/big.bin", "ckpt.pt", "train.py"]  # largest first
    assert "`/data/` in .torchrunignore" in lines[0] and "`/ckpt.pt` in .torchrunignore" in lines[1]
    assert refusals(tree, limit=4000, force=True) == []
    assert refusals(tree, limit=5010) == []


def test_the_command_refuses_before_anything_is_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, {"train.py": "", ".env": "TOKEN=1"})
    (tmp_path / "big.bin").open("wb").truncate(pack.DEFAULT_SIZE_LIMIT + 1)  # sparse: costs no disk
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))  # a connection attempt would fail differently
    assert main(["submit", "--queue", "q", "--nodes", "1", "python train.py"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: nothing was sent: files that look like secrets")
    assert ".env: environment secrets (.env)" in err
    assert "over the 512.0 MB limit" in err and "big.bin" in err
    assert "Traceback" not in err


def test_symlinks_inside_are_kept_relative_and_links_leaving_are_refused_even_forced(tmp_path: Path) -> None:
    root = write(tmp_path / "proj", {"pkg/m.py": "", "data/a.csv": ""})
    write(tmp_path, {"outside.txt": ""})
    os.symlink("../pkg/m.py", root / "data/rel")
    os.symlink(root / "pkg", root / "abs_inside")
    os.symlink("/etc/passwd", root / "abs_out")
    os.symlink("../../outside.txt", root / "data/rel_out")
    os.symlink("abs_out", root / "via_link")  # inside by name, outside once resolved
    tree = scan(root)
    links = {e.path: e.link for e in tree.entries if e.kind == "symlink"}
    assert links == {"data/rel": "../pkg/m.py", "abs_inside": "pkg"}
    assert {p for p, _ in tree.escaping_links} == {"abs_out", "data/rel_out", "via_link"}
    for problems in (refusals(tree), refusals(tree, force=True)):
        assert len(problems) == 1 and "abs_out -> /etc/passwd" in problems[0]


def test_the_reserved_marker_name_is_refused(tmp_path: Path) -> None:
    write(tmp_path, {".sync_success": "{}", "sub/.sync_success": "{}"})
    assert refusals(scan(tmp_path), force=True) == [
        ".sync_success: reserved name of the workspace marker; rename it"
    ]


def test_drop_rule_names_the_top_directory_or_the_file() -> None:
    assert drop_rule("a/b/c.bin") == "/a/"
    assert drop_rule("c.bin") == "/c.bin"


# --- the archive ------------------------------------------------------------------------------------

TREE = {
    "train.py": "print(1)\n",
    "pkg/__init__.py": "",
    "pkg/model.py": "x = 1\n",
    "data/labels.txt": "a\nb\n",
}


def test_same_tree_same_checksum_whatever_the_mtimes_and_creation_order(tmp_path: Path) -> None:
    first = write(tmp_path / "one", TREE)
    second = write(tmp_path / "two", dict(reversed(list(TREE.items()))))
    for i, path in enumerate(sorted(second.rglob("*"))):
        os.utime(path, (1_000_000 + i, 2_000_000 + 7 * i))
    assert sha(first) == sha(second)


def test_same_checksum_whatever_order_the_file_system_lists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write(tmp_path, TREE)
    before = sha(root)
    listing = pack.list_dir
    monkeypatch.setattr(pack, "list_dir", lambda d: list(reversed(listing(d))))
    assert sha(root) == before


def test_content_and_mode_change_the_checksum(tmp_path: Path) -> None:
    root = write(tmp_path, TREE)
    before = sha(root)
    (root / "train.py").chmod(0o755)
    after_mode = sha(root)
    (root / "train.py").write_text("print(2)\n")
    assert len({before, after_mode, sha(root)}) == 3


def test_archive_entries_carry_no_time_or_owner(tmp_path: Path) -> None:
    root = write(tmp_path, TREE)
    os.symlink("train.py", root / "link")
    out = io.BytesIO()
    archive = write_archive(scan(root), out)
    assert out.getvalue()[4:8] == b"\0\0\0\0"  # gzip header mtime
    with tarfile.open(fileobj=io.BytesIO(out.getvalue()), mode="r:gz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == [
        "data",
        "data/labels.txt",
        "link",
        "pkg",
        "pkg/__init__.py",
        "pkg/model.py",
        "train.py",
    ]
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
    assert (archive.files, archive.bytes, archive.size) == (4, 19, len(out.getvalue()))


def test_the_sync_program_accepts_the_archive_and_rebuilds_the_tree(tmp_path: Path) -> None:
    root = write(tmp_path / "proj", TREE)
    os.symlink("pkg/model.py", root / "link")
    path = tmp_path / "upload.tar.gz"
    with open(path, "wb") as f:
        archive = write_archive(scan(root), f)
    workspace = tmp_path / "workspace"
    with open(path, "rb") as f:
        marker = receive(
            workspace, 0, size=archive.size, sha256=archive.sha256, limits=Limits(), fd=f.fileno()
        )
    assert (marker.sha256, marker.source) == (archive.sha256, "upload")
    tree = workspace / "generations" / "0"
    for rel, content in TREE.items():
        assert (tree / rel).read_text() == content
    assert os.readlink(tree / "link") == "pkg/model.py"
