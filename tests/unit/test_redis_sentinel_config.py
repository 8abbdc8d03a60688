"""Redis Sentinel configuration: the redis+sentinel URL form, the settings.redis block, redisDurability,
errors that name the field, and a password that never shows in an error or a printed URL."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.sentinel import SentinelConnectionPool

from adapters.redis_connect import client_for
from broker.app.main import with_environment
from broker.config.redis_settings import parse_sentinel_url, redact, sentinel_url
from broker.config.settings import parse_fleet_config
from broker.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
SECRET = "pa:ss@w/rd"


def _cfg(settings: dict[str, object]) -> dict[str, object]:
    return {"clusters": [{"name": "east", "kubeconfig": "east.kubeconfig"}], "settings": settings}


def test_the_url_names_sentinels_master_db_and_both_passwords() -> None:
    url = sentinel_url(["h1:26379", "h2:26380"], "mymaster", 3, SECRET, "sent-pw")
    target = parse_sentinel_url(url)
    assert target.sentinels == (("h1", 26379), ("h2", 26380))
    assert (target.master_name, target.db) == ("mymaster", 3)
    assert (target.password, target.sentinel_password) == (SECRET, "sent-pw")
    assert SECRET not in repr(target)


def test_defaults_port_26379_db_0_and_no_password() -> None:
    target = parse_sentinel_url("redis+sentinel://s1,s2:1234/m")
    assert target.sentinels == (("s1", 26379), ("s2", 1234))
    assert (target.db, target.password, target.sentinel_password) == (0, None, None)


@pytest.mark.parametrize(
    ("url", "part"),
    [
        (f"redis+sentinel://:{SECRET}@/m/0", "at least one sentinel"),
        ("redis+sentinel://:topsecret@h1:26379", "names the master"),
        ("redis+sentinel://:topsecret@h1:notaport/m", "valid port"),
        ("redis+sentinel://:topsecret@h1/m/x", "database"),
        ("redis+sentinel://:topsecret@h1/m/0?password=x", "unknown parameter"),
    ],
)
def test_a_bad_url_is_refused_naming_the_part_never_the_password(url: str, part: str) -> None:
    with pytest.raises(ValueError, match=part) as err:
        parse_sentinel_url(url)
    assert "topsecret" not in str(err.value) and SECRET not in str(err.value)


def test_a_bad_url_in_the_environment_names_redis_url_without_its_password() -> None:
    cfg = parse_fleet_config(_cfg({}), "c.yaml", REPO)
    with pytest.raises(ConfigError, match="redisUrl") as err:
        with_environment(cfg, {"REDIS_URL": "redis+sentinel://:topsecret@h1:26379"})
    assert "topsecret" not in str(err.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "redis+sentinel://:s3cret@h1:26379,h2:26379/m/0?sentinelPassword=other",
            "redis+sentinel://:***@h1:26379,h2:26379/m/0?sentinelPassword=***",
        ),
        ("redis+sentinel://h1:26379/m/0", "redis+sentinel://h1:26379/m/0"),
        ("redis://:s3cret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
    ],
)
def test_printed_urls_carry_no_password(url: str, shown: str) -> None:
    assert redact(url) == shown


def test_the_settings_block_becomes_the_sentinel_url() -> None:
    block = {"sentinels": ["a:26379", "b"], "masterName": "gpufed", "password": SECRET, "db": 2}
    settings = parse_fleet_config(_cfg({"redis": block}), "c.yaml", REPO).settings
    target = parse_sentinel_url(settings.redis_url)
    assert target.sentinels == (("a", 26379), ("b", 26379))
    assert (target.master_name, target.db, target.password) == ("gpufed", 2, SECRET)


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"redis": {"sentinels": [], "masterName": "m"}}, "redis.sentinels"),
        ({"redis": {"sentinels": ["a"]}}, "redis.masterName"),
        ({"redis": {"sentinels": ["a:99999"], "masterName": "m"}}, "redis.sentinels"),
        ({"redis": {"sentinels": ["a"], "masterName": "m", "pasword": "x"}}, "redis.pasword"),
        ({"redis": {"sentinels": ["a"], "masterName": "m"}, "redisUrl": "redis://x"}, "not both"),
        ({"redisDurability": "quorum"}, "redisDurability"),
    ],
)
def test_bad_sentinel_settings_name_the_field(settings: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        parse_fleet_config(_cfg(settings), "c.yaml", REPO)


def test_a_sentinel_url_builds_a_client_that_asks_the_sentinels_for_the_primary() -> None:
    client = client_for(sentinel_url(["127.0.0.1:1"], "gpufed", 1, SECRET), socket_timeout=1)
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "gpufed" and pool.connection_kwargs["db"] == 1
    assert SECRET not in repr(client)
    client.close()


def test_a_plain_url_is_unchanged() -> None:
    client = client_for("redis://127.0.0.1:6390/4")
    assert client.connection_pool.connection_kwargs["db"] == 4
    client.close()
