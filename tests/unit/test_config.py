"""clusters.yaml validation: good files load, bad ones are refused with the file, cluster and field named."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from broker.config.settings import load_fleet_config, parse_fleet_config
from broker.core.errors import ConfigError
from broker.core.model import Tier
from broker.scheduler.placement import DEFAULT_SCORES
from broker.scheduler.plugins.binpack import BinPackScore
from broker.scheduler.plugins.gpu_reliability import GpuReliabilityScore
from broker.scheduler.plugins.health import HealthFreshness
from broker.scheduler.plugins.nvlink import NvlinkCliqueScore
from broker.scheduler.plugins.price import PriceScore

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
    from broker.app.demo import redacted

    assert redacted(url) == shown


def _with_placement(placement: object) -> dict[str, object]:
    return {
        "clusters": [{"name": "east", "kubeconfig": "east.kubeconfig"}],
        "settings": {"staleAfterSeconds": 45, "placement": placement},
    }


def test_settings_placement_builds_the_policy_from_the_registry() -> None:
    placement = {
        "preferOnPrem": False,
        "filters": {"numa-fit": {"enabled": False}},
        "scores": {
            "binpack": {"weight": 5, "args": {"strategy": "spread"}},
            "price": {"args": {"ceilingPerGpuHour": 4}},
            "queue": {"enabled": False},
        },
    }
    policy = parse_fleet_config(_with_placement(placement), "c.yaml", REPO).settings.placement_policy()
    assert [f.name for f in policy.filters] == [
        "health",
        "allowlist",
        "burst",
        "workload-kind",
        "gpu-product",
        "gpu-fit",
        "mig-fit",
        "nvlink-clique",
        "price-cap",
        "kueue",
        "namespace-quota",
    ]
    assert HealthFreshness(staleness_limit_seconds=45.0) in policy.filters  # from staleAfterSeconds
    assert policy.scores == (
        BinPackScore(weight=5, strategy="spread"),
        PriceScore(ceiling_per_gpu_hour=4.0),
        NvlinkCliqueScore(),
        GpuReliabilityScore(),
    )
    assert policy.prefer_onprem is False


def test_without_settings_placement_the_registry_defaults_run() -> None:
    cfg = parse_fleet_config({"clusters": [{"name": "east", "kubeconfig": "x"}]}, "c.yaml", REPO)
    policy = cfg.settings.placement_policy()
    assert policy.scores == DEFAULT_SCORES and policy.staleness_limit_s == 30.0


@pytest.mark.parametrize(
    ("placement", "expected"),
    [
        (
            {"scores": {"binpak": {}}},
            "settings.placement.scores: binpak: unknown score plugin (known: binpack",
        ),
        ({"filters": {"stale": {}}}, "settings.placement.filters: stale: unknown filter plugin"),
        (
            {"filters": {"health": {"weight": 2}}},
            "settings.placement.filters: health.weight: filters take no weight",
        ),
        (
            {"scores": {"binpack": {"args": {"strategy": "scatter"}}}},
            "settings.placement.scores: binpack.args.strategy: Input should be 'binpack' or 'spread'",
        ),
        (
            {"scores": {"price": {"args": {"ceiling": 3}}}},
            "settings.placement.scores: price.args.ceiling: unknown arg (args: ceilingPerGpuHour)",
        ),
        (
            {"filters": {"health": {"args": {"stalenessLimitSeconds": "soon"}}}},
            "settings.placement.filters: health.args.stalenessLimitSeconds: Input should be a valid number",
        ),
        ({"scores": {"price": {"weight": -1}}}, "settings.placement.scores.price.weight"),
        ({"scores": {"price": {"enabled": True, "colour": 1}}}, "settings.placement.scores.price.colour"),
        ({"strategy": "spread"}, "settings.placement.strategy"),
    ],
)
def test_bad_placement_settings_name_the_field(placement: object, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_fleet_config(_with_placement(placement), "c.yaml", REPO)
    assert expected in str(err.value)


def test_the_slow_client_deadlines_are_settings_with_defaults_environment_and_named_errors() -> None:
    from broker.app.main import with_environment

    base = {"clusters": [{"name": "east", "kubeconfig": "x"}]}
    cfg = parse_fleet_config(base, "c.yaml", REPO)
    assert (cfg.settings.request_headers_seconds, cfg.settings.request_body_seconds) == (10.0, 60.0)
    cfg = parse_fleet_config(
        {**base, "settings": {"requestHeadersSeconds": 5, "requestBodySeconds": 30}}, "c.yaml", REPO
    )
    assert (cfg.settings.request_headers_seconds, cfg.settings.request_body_seconds) == (5.0, 30.0)
    env = {"GPUFED_REQUEST_HEADERS_SECONDS": "2", "GPUFED_REQUEST_BODY_SECONDS": "7"}
    cfg = with_environment(cfg, env)
    assert (cfg.settings.request_headers_seconds, cfg.settings.request_body_seconds) == (2.0, 7.0)
    with pytest.raises(ConfigError, match="requestHeadersSeconds"):
        parse_fleet_config({**base, "settings": {"requestHeadersSeconds": 0}}, "c.yaml", REPO)


def test_creates_in_flight_across_the_fleet_are_a_setting_with_a_default_and_a_named_error() -> None:
    """settings.dispatchInFlight bounds the creates running at once over every member (64 by default: a
    burst onto 1,000 members is not 2,000 requests at once); 0 is refused by name."""
    base = {"clusters": [{"name": "east", "kubeconfig": "x"}]}
    assert parse_fleet_config(base, "c.yaml", REPO).settings.dispatch_in_flight == 64
    cfg = parse_fleet_config({**base, "settings": {"dispatchInFlight": 16}}, "c.yaml", REPO)
    assert cfg.settings.dispatch_in_flight == 16
    with pytest.raises(ConfigError, match="dispatchInFlight"):
        parse_fleet_config({**base, "settings": {"dispatchInFlight": 0}}, "c.yaml", REPO)


@pytest.mark.parametrize(
    ("settings", "probe_seconds", "window_seconds"),
    [
        ({}, 2.0, 10.0),  # the defaults: every 2 s, a 10 s error-rate window
        ({"clusterLostSeconds": 6}, 1.2, 10.0),
        ({"clusterLostSeconds": 30}, 6.0, 30.0),  # a large fleet probes less, and judges over longer
        ({"clusterLostSeconds": 120}, 10.0, 50.0),  # the derived interval stops at 10 s
        ({"clusterLostSeconds": 30, "probeIntervalSeconds": 10}, 10.0, 50.0),
    ],
)
def test_the_probe_interval_follows_cluster_lost_seconds_unless_set(
    settings: dict[str, float], probe_seconds: float, window_seconds: float
) -> None:
    from broker.app.main import health_thresholds

    base = {"clusters": [{"name": "east", "kubeconfig": "x"}], "settings": settings}
    thresholds = health_thresholds(parse_fleet_config(base, "c.yaml", REPO))
    assert thresholds.probe_interval_seconds == pytest.approx(probe_seconds)
    assert thresholds.window_seconds == pytest.approx(window_seconds)
    assert thresholds.lost_seconds == settings.get("clusterLostSeconds", 10.0)


def test_a_probe_interval_that_would_lose_members_on_one_failed_probe_is_refused_with_both_fields() -> None:
    base = {"clusters": [{"name": "east", "kubeconfig": "x"}]}
    too_slow = {"clusterLostSeconds": 10, "probeIntervalSeconds": 5}
    with pytest.raises(ConfigError, match=r"probeIntervalSeconds: 5 must be at most clusterLostSeconds / 3"):
        parse_fleet_config({**base, "settings": too_slow}, "c.yaml", REPO)
    with pytest.raises(ConfigError, match="probeIntervalSeconds"):
        parse_fleet_config({**base, "settings": {"probeIntervalSeconds": 0}}, "c.yaml", REPO)
