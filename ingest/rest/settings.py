"""The REST API's settings: section [rest]; ConfigError one-liners for bad values."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import multiaddr

from core.config import Config, ConfigError


@dataclass(frozen=True)
class RestSettings:
    """nwaku's defaults: off, 127.0.0.1:8645, admin routes off, no cross-origin requests, 50
    cached relay messages, 16 MiB request bodies."""
    enabled: bool = False
    address: str = "127.0.0.1"
    port: int = 8645
    admin: bool = False
    # Origins allowed cross-origin requests ("*" and "?" wildcards, e.g. "localhost:*"); empty: none.
    allow_origins: tuple[str, ...] = ()
    relay_cache_capacity: int = 50
    max_body_bytes: int = 16 * 1024 * 1024
    # How long a REST request waits for a remote peer (store with peerAddr) or a publish.
    request_timeout_s: float = 5.0
    # The filter service node of the /filter/v2 routes (nwaku's --filternode): a multiaddr ending
    # in /p2p/<peer id>; empty: no filter client (those routes answer 404).
    filter_peer: str = ""
    # Content topics the relay cache holds from start (nwaku's --content-topic: its REST server
    # subscribes its cache to them), read by GET /relay/v1/auto/messages/{contentTopic}.
    content_topics: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: Config) -> RestSettings:
        r = config["rest"]
        try:
            ipaddress.ip_address(r["address"])
        except ValueError:
            raise ConfigError(f"rest.address: expected an IP address, got {r['address']!r}") from None
        if not 0 <= r["port"] <= 65535:
            raise ConfigError(f"rest.port: expected a port 0-65535, got {r['port']}")
        for key in ("relay_cache_capacity", "max_body_bytes"):
            if r[key] < 1:
                raise ConfigError(f"rest.{key}: expected at least 1, got {r[key]}")
        if r["request_timeout_s"] <= 0:
            raise ConfigError(f"rest.request_timeout_s: expected a positive number of seconds, "
                              f"got {r['request_timeout_s']}")
        origins = tuple(str(o) for o in r["allow_origins"])
        if any(not o for o in origins):
            raise ConfigError("rest.allow_origins: an empty origin")
        peer = str(r["filter_peer"]).strip()
        if peer:
            try:
                multiaddr.Multiaddr(peer).value_for_protocol("p2p")
            except Exception:  # noqa: BLE001 - multiaddr raises many types
                raise ConfigError(f"rest.filter_peer: {peer!r} is not a multiaddr ending in /p2p/<peer id>") from None
        content_topics = tuple(str(t) for t in r.get("content_topics", ()) if str(t))
        return cls(bool(r["enabled"]), r["address"], r["port"], bool(r["admin"]), origins,
                   r["relay_cache_capacity"], r["max_body_bytes"], float(r["request_timeout_s"]), peer,
                   content_topics)
