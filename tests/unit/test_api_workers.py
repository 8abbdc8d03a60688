"""broker.app.api_workers: the API processes' command line and the members file they read at start."""

from __future__ import annotations

from pathlib import Path

from broker.app.api_workers import ApiProcessArgs, api_argv, read_members, write_members
from broker.core.model import ClusterTraits


def test_the_command_line_carries_socket_replica_members_shards_and_tls(tmp_path: Path) -> None:
    args = ApiProcessArgs(
        tmp_path / "clusters.yaml",
        "host-1-abc",
        tmp_path / "members.pickle",
        ("shard-0", "shard-1"),
        tmp_path / "c.pem",
        tmp_path / "k.pem",
    )
    argv = api_argv(args, fd=7, ready_fd=9)
    assert argv[1:3] == ["-m", "broker.app.api_process"]
    pairs = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert pairs["--fd"] == "7" and pairs["--ready-fd"] == "9" and pairs["--replica"] == "host-1-abc"
    assert pairs["--members"] == str(tmp_path / "members.pickle")
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--shard"] == ["shard-0", "shard-1"]
    assert pairs["--tls-cert"] == str(tmp_path / "c.pem") and "--insecure-no-auth" not in argv


def test_members_written_are_read_back_whole_and_none_before_the_first(tmp_path: Path) -> None:
    path = tmp_path / "members.pickle"
    assert read_members(path) is None
    members = {"a": ClusterTraits(name="a"), "b": ClusterTraits(name="b", region="eu")}
    write_members(path, members)
    assert read_members(path) == members
    write_members(path, {"a": members["a"]})  # a cluster left
    assert read_members(path) == {"a": members["a"]}
    assert not path.with_name(path.name + ".tmp").exists()
