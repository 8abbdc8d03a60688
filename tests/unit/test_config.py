"""clusters.yaml validation: good files load, bad ones are refused with the file, cluster and field named."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from broker.config import load_fleet_config, parse_fleet_config
from broker.errors import ConfigError
from broker.model import Tier

REPO = Path(__file__).resolve().parents[2]


def _kubeconfig(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": name,
                "clusters": [{"name": name, "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": name, "user": {"token": "t"}}],
                "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
            }
        )
    )
    return path


def _write(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "clusters.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_example_file_parses_with_three_clusters_and_their_traits() -> None:
    raw = yaml.safe_load((REPO / "clusters.example.yaml").read_text())
    cfg = parse_fleet_config(raw, "clusters.example.yaml", REPO)
    assert [c.name for c in cfg.clusters] == ["onprem-a", "onprem-b", "cloud-burst"]
    traits = cfg.traits()
    assert traits["cloud-burst"].tier is Tier.CLOUD
    assert traits["onprem-b"].kueue_local_queue == "gpu"
    assert traits["onprem-b"].topology_scheduler == "topo-aware-scheduler"
    assert cfg.cluster("onprem-a").kubeconfig == (REPO / ".demo/kubeconfigs/onprem-a.kubeconfig").resolve()


def test_relative_kubeconfig_resolves_against_the_config_file(tmp_path: Path) -> None:
    _kubeconfig(tmp_path, "east")
    path = _write(tmp_path, {"clusters": [{"name": "east", "kubeconfig": "east.kubeconfig"}]})
    cfg = load_fleet_config(path)
    assert cfg.clusters[0].kubeconfig == tmp_path / "east.kubeconfig"


@pytest.mark.parametrize(
    ("cluster", "expected"),
    [
        ({"name": "Bad_Name", "kubeconfig": "x"}, "cluster 'Bad_Name' (clusters[1]): name"),
        ({"name": "west", "kubeconfig": "x", "tier": "moon"}, "cluster 'west' (clusters[1]): tier"),
        ({"name": "west", "kubeconfig": "x", "colour": 1}, "cluster 'west' (clusters[1]): colour"),
        ({"name": "west"}, "cluster 'west' (clusters[1]): kubeconfig"),
        (
            {"name": "west", "kubeconfig": "x", "pricePerGpuHour": {"L4": -1}},
            "cluster 'west' (clusters[1]): pricePerGpuHour",
        ),
        ({"name": "east", "kubeconfig": "x"}, "cluster 'east' (clusters[1]): name: duplicate"),
    ],
)
def test_bad_cluster_entry_names_file_cluster_and_field(
    tmp_path: Path, cluster: dict[str, object], expected: str
) -> None:
    _kubeconfig(tmp_path, "east")
    path = _write(tmp_path, {"clusters": [{"name": "east", "kubeconfig": "east.kubeconfig"}, cluster]})
    with pytest.raises(ConfigError) as err:
        load_fleet_config(path)
    assert str(path) in str(err.value)
    assert expected in str(err.value)


def test_missing_kubeconfig_file_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, {"clusters": [{"name": "east", "kubeconfig": "nowhere.kubeconfig"}]})
    with pytest.raises(ConfigError, match=r"cluster 'east' \(clusters\[0\]\): kubeconfig: file not found"):
        load_fleet_config(path)


def test_unknown_context_is_named(tmp_path: Path) -> None:
    _kubeconfig(tmp_path, "east")
    path = _write(
        tmp_path, {"clusters": [{"name": "east", "kubeconfig": "east.kubeconfig", "context": "west"}]}
    )
    with pytest.raises(ConfigError, match="context: 'west' not in"):
        load_fleet_config(path)


def test_not_yaml_and_empty_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "clusters.yaml"
    path.write_text("clusters: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_fleet_config(path)
    path.write_text("clusters: []")
    with pytest.raises(ConfigError, match="clusters: at least one cluster, or clusterProfiles"):
        load_fleet_config(path)


@pytest.mark.parametrize("prefix", ["gpufed:prod", "", "has space"])
def test_a_redis_prefix_the_store_cannot_use_is_refused_with_the_field_named(
    tmp_path: Path, prefix: str
) -> None:
    """The store separates key parts with ':'; a prefix with one would be refused only at startup."""
    doc = {
        "clusters": [{"name": "east", "kubeconfig": str(_kubeconfig(tmp_path, "east"))}],
        "settings": {"redisPrefix": prefix},
    }
    with pytest.raises(ConfigError, match=r"settings\.redisPrefix"):
        load_fleet_config(_write(tmp_path, doc))


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("redis://user:pw@redis.internal/1", "redis://user:***@redis.internal/1"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ],
)
def test_the_demo_never_prints_a_redis_password(url: str, shown: str) -> None:
    from broker.demo import redacted

    assert redacted(url) == shown
