"""discv5's settings ([bridge] discv5_*; docs/discovery.md)."""
from __future__ import annotations

from dataclasses import dataclass

from core.config import Config, ConfigError
from ingest.enr import EnrError, decode_text


@dataclass(frozen=True)
class Discv5Settings:
    host: str  # the UDP listen address (bridge.listen_host)
    port: int  # 0: any free port
    bootstrap: tuple[bytes, ...]  # raw ENRs
    target_peers: int  # relay peers to dial from what discv5 finds
    lookup_interval_s: float
    whoareyou_per_s: float
    request_timeout_s: float = 2.0

    @classmethod
    def from_config(cls, config: Config) -> Discv5Settings:
        b = config["bridge"]
        if not 0 <= b["discv5_port"] <= 65535:
            raise ConfigError(f"bridge.discv5_port: expected a port 0-65535 (-1: off), got {b['discv5_port']}")
        boot: list[bytes] = []
        for text in b["discv5_bootstrap"]:
            try:
                boot.append(decode_text(text).raw)
            except EnrError as exc:
                raise ConfigError(f"bridge.discv5_bootstrap: not a valid ENR ({exc})") from None
        if b["discv5_lookup_interval_s"] <= 0:
            raise ConfigError(f"bridge.discv5_lookup_interval_s: expected a positive number of seconds, "
                              f"got {b['discv5_lookup_interval_s']}")
        if b["discv5_target_peers"] < 0:
            raise ConfigError(f"bridge.discv5_target_peers: expected 0 or more, got {b['discv5_target_peers']}")
        return cls(host=b["listen_host"], port=b["discv5_port"], bootstrap=tuple(boot),
                   target_peers=b["discv5_target_peers"], lookup_interval_s=b["discv5_lookup_interval_s"],
                   whoareyou_per_s=max(0.0, b["discv5_whoareyou_per_s"]))
