"""Where Redis is: a plain `redis://` URL, or Redis Sentinel as a URL or as a settings block.

Owns the Sentinel URL form, its parsing into a SentinelTarget (pure: no connection is made here; the
client is built by adapters.redis_connect), the `settings.redis` block that is an alternative to
writing the URL, and redacting a password out of any Redis URL before it is printed.

The URL form (docs/operations.md, "Redis with Sentinel"):

    redis+sentinel://[[username]:password@]host1:26379[,host2:26379,...]/<master-name>[/<db>][?sentinelPassword=...]

- the userinfo's password (and username) is the Redis primary's (`requirepass` / ACL user), percent-encoded;
- the hosts are the sentinels (port 26379 when left out); the first path segment is the master name the
  sentinels monitor; the second the database number (default 0);
- `sentinelPassword` (query) is the sentinels' own password when they have one (`requirepass` in
  sentinel.conf); without it the sentinels are reached without a password.

The same form (`redis+sentinel://`, comma-separated hosts, master name then db in the path) is the one
Celery/kombu and several Redis clients accept. `settings.redis` is the block form of the same facts:

    settings:
      redis: {sentinels: ["h1:26379", "h2:26379"], masterName: mymaster, password: ..., sentinelPassword: ..., db: 0}

It is turned into the URL at load, so everything downstream (the state store, the lease, the pollers in
Ray actors) is handed one string. A password never appears in an error message from this module.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

SENTINEL_SCHEME = "redis+sentinel"
DEFAULT_SENTINEL_PORT = 26379
_MASTER_NAME = r"^[A-Za-z0-9_.-]+$"

__all__ = [
    "SENTINEL_SCHEME",
    "RedisSentinelConfig",
    "SentinelTarget",
    "block_to_url",
    "is_sentinel_url",
    "parse_sentinel_url",
    "redact",
    "sentinel_url",
]


@dataclass(frozen=True)
class SentinelTarget:
    """A parsed redis+sentinel URL: where the sentinels are and what to ask them for."""

    sentinels: tuple[tuple[str, int], ...]
    master_name: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None

    def __repr__(self) -> str:  # never the passwords
        hosts = ",".join(f"{h}:{p}" for h, p in self.sentinels)
        return f"SentinelTarget({hosts}/{self.master_name}/{self.db})"


def is_sentinel_url(url: str) -> bool:
    return url.lower().startswith(SENTINEL_SCHEME + "://")


def _host_port(item: str, where: str) -> tuple[str, int]:
    host, sep, port = item.strip().rpartition(":")
    if not sep:
        host, port = item.strip(), str(DEFAULT_SENTINEL_PORT)
    host = host.strip("[]")  # an IPv6 literal in brackets
    if not host:
        raise ValueError(f"{where}: {item!r} has no host")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{where}: {item!r} has no valid port (1-65535)")
    return host, int(port)


def parse_sentinel_url(url: str) -> SentinelTarget:
    """The SentinelTarget of a redis+sentinel URL; ValueError naming the part that is wrong."""
    if not is_sentinel_url(url):
        raise ValueError(f"redisUrl: not a {SENTINEL_SCHEME}:// URL: {redact(url)}")
    rest = url[len(SENTINEL_SCHEME) + 3 :]
    # Hosts and master names hold no '@' or '?': the last '@' ends the userinfo even when a password
    # holds an unencoded '/', '?' or '@'.
    userinfo, at, rest = rest.rpartition("@")
    rest, _, query = rest.partition("?")
    hosts, _, path = rest.partition("/")
    username: str | None = None
    password: str | None = None
    if at:
        user, colon, pw = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(pw) if colon else None
        if not colon and user:  # `secret@host`: the whole userinfo is a password, as redis-py reads it
            username, password = None, unquote(user)
    if not hosts:
        raise ValueError("redisUrl: a redis+sentinel URL names at least one sentinel host:port")
    sentinels = tuple(_host_port(h, "redisUrl: sentinel") for h in hosts.split(",") if h.strip())
    segments = [s for s in path.split("/") if s]
    if not segments:
        raise ValueError(
            "redisUrl: a redis+sentinel URL names the master after the hosts (/<master-name>/<db>)"
        )
    master = unquote(segments[0])
    if not re.match(_MASTER_NAME, master):
        raise ValueError(f"redisUrl: master name {master!r}: letters, digits, '_', '.', '-' only")
    db = 0
    if len(segments) > 1:
        if not segments[1].isdigit():
            raise ValueError(f"redisUrl: database {segments[1]!r} is not a number")
        db = int(segments[1])
    if len(segments) > 2:
        raise ValueError("redisUrl: a redis+sentinel path is /<master-name>[/<db>]")
    params = parse_qs(query, keep_blank_values=True)
    unknown = sorted(set(params) - {"sentinelPassword"})
    if unknown:
        raise ValueError(f"redisUrl: unknown parameter(s) {', '.join(unknown)} (known: sentinelPassword)")
    sentinel_password = params["sentinelPassword"][-1] if "sentinelPassword" in params else None
    return SentinelTarget(sentinels, master, db, username, password, sentinel_password or None)


def sentinel_url(
    sentinels: list[str],
    master_name: str,
    db: int = 0,
    password: str | None = None,
    sentinel_password: str | None = None,
) -> str:
    """The redis+sentinel URL of the given facts (passwords percent-encoded)."""
    auth = f":{quote(password, safe='')}@" if password else ""
    query = f"?sentinelPassword={quote(sentinel_password, safe='')}" if sentinel_password else ""
    return f"{SENTINEL_SCHEME}://{auth}{','.join(sentinels)}/{master_name}/{db}{query}"


def redact(url: str) -> str:
    """The URL with every password replaced by ***, for logs and error messages (any Redis scheme)."""
    if is_sentinel_url(url):
        head, at, tail = url.rpartition("@")
        if at:
            user = head[len(SENTINEL_SCHEME) + 3 :].partition(":")[0]
            url = f"{SENTINEL_SCHEME}://{user}:***@{tail}"
        return re.sub(r"(sentinelPassword=)[^&]*", r"\1***", url)
    try:
        parts = urlsplit(url)
        if parts.password is None and "@" not in parts.netloc:
            return url
        host = parts.hostname or ""
        netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:  # unparseable: print nothing of it that could be a secret
        return "<redis url>"


class RedisSentinelConfig(BaseModel):
    """`settings.redis`: Redis Sentinel as a block instead of a redis+sentinel URL."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    sentinels: list[str] = Field(min_length=1)
    master_name: str = Field(alias="masterName", pattern=_MASTER_NAME)
    password: str | None = None
    sentinel_password: str | None = Field(default=None, alias="sentinelPassword")
    db: int = Field(default=0, ge=0)

    @field_validator("sentinels")
    @classmethod
    def _hosts(cls, v: list[str]) -> list[str]:
        return [":".join(map(str, _host_port(h, "sentinels"))) for h in v]

    def url(self) -> str:
        return sentinel_url(self.sentinels, self.master_name, self.db, self.password, self.sentinel_password)


def block_to_url(raw: Any) -> Any:
    """Settings as given, with a `redis:` block replaced by the redisUrl it stands for (a ValueError
    naming `redis.<field>` when the block is wrong, or when redisUrl is given too)."""
    if not isinstance(raw, Mapping) or raw.get("redis") is None:
        return raw
    out = dict(raw)
    block = out.pop("redis")
    if "redisUrl" in out or "redis_url" in out:
        raise ValueError("redis: give either settings.redis (Sentinel) or settings.redisUrl, not both")
    try:
        cfg = RedisSentinelConfig.model_validate(block)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(the block)"
        raise ValueError(f"redis.{field}: {first['msg'].removeprefix('Value error, ')}") from None
    out["redisUrl"] = cfg.url()
    return out
