"""RlnSettings: section [rln] of the configuration, checked, with one-line ConfigErrors."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.config import Config, ConfigError
from ingest.rln.rules import NULLIFIER_RULES, Rules, rln_identifier

# The Waku Network (cluster 1): nwaku 0.38's WakuRlnV2 on Linea Sepolia.
TWN_CLUSTER = 1
TWN_CHAIN_ID = 59141
TWN_CONTRACT = "0xB9cd878C90E49F797B4431fBF4fb333108CB90e6"
MEMBERSHIPS = ("chain", "static")


@dataclass(frozen=True)
class RlnSettings:
    rules: Rules
    pubsub_topics: tuple[str, ...]           # empty: every topic the node relays
    membership: str                          # "chain" or "static"
    eth_client_addresses: tuple[str, ...]
    eth_contract_address: str
    chain_id: int                            # 0: the endpoint's
    eth_private_key: str
    keystore_path: str
    keystore_password: str
    membership_index: int                    # -1: the keystore's only credential
    user_message_limit: int                  # the static group's limit per member
    acceptable_root_window: int
    root_poll_s: float
    static_rate_commitments: tuple[bytes, ...]  # 32 B little-endian leaves
    prove_lightpush: bool
    rpc_timeout_s: float
    verify_threads: int = 0                  # 0: one per core but the event loop's

    def applies_to(self, topic: str) -> bool:
        return not self.pubsub_topics or topic in self.pubsub_topics

    @classmethod
    def from_config(cls, config: Config, cluster_id: int) -> RlnSettings | None:
        """The settings when RLN is on (rln.enabled: "auto" = on for The Waku Network, cluster 1,
        as nwaku; "true"; "false"), else None."""
        r = config["rln"]
        enabled = str(r["enabled"]).strip().lower()
        if enabled not in ("auto", "true", "false"):
            raise ConfigError(f"rln.enabled: expected auto, true or false, got {r['enabled']!r}")
        if enabled == "false" or (enabled == "auto" and cluster_id != TWN_CLUSTER):
            return None
        membership = str(r["membership"])
        if membership not in MEMBERSHIPS:
            raise ConfigError(f"rln.membership: expected chain or static, got {membership!r}")
        rule = str(r["external_nullifier"])
        if rule not in NULLIFIER_RULES:
            raise ConfigError(f"rln.external_nullifier: expected {' or '.join(NULLIFIER_RULES)}, got {rule!r}")
        try:
            identifier = rln_identifier(str(r["rln_identifier"]))
        except ValueError as exc:
            raise ConfigError(f"rln.rln_identifier: {exc}") from None
        epoch_s = int(r["epoch_s"])
        if epoch_s <= 0:
            raise ConfigError(f"rln.epoch_s: must be positive, got {epoch_s}")
        limit = int(r["user_message_limit"])
        if limit <= 0:
            raise ConfigError(f"rln.user_message_limit: must be positive, got {limit}")
        window = int(r["acceptable_root_window"])
        if window <= 0:
            raise ConfigError(f"rln.acceptable_root_window: must be positive, got {window}")
        clients = tuple(str(a) for a in r["eth_client_address"] if str(a))
        contract, chain_id = str(r["eth_contract_address"]), int(r["chain_id"])
        if membership == "chain":
            contract, chain_id = contract_of(r, cluster_id)
            if not clients:
                raise ConfigError(
                    "rln: on (rln.enabled=" + enabled + (", cluster 1: The Waku Network" if enabled == "auto" else "")
                    + ") with membership from the chain, but rln.eth_client_address is empty: give an Ethereum "
                    "JSON-RPC endpoint (nwaku's --rln-relay-eth-client-address), or rln.membership=static, "
                    "or rln.enabled=false")
            if not contract:
                raise ConfigError("rln.eth_contract_address: empty (the RLN membership contract's address)")
        commitments = []
        for i, text in enumerate(r["static_rate_commitments"]):
            commitments.append(_field(f"rln.static_rate_commitments[{i}]", str(text)))
        if membership == "static" and not commitments:
            raise ConfigError("rln.static_rate_commitments: empty, but rln.membership=static needs the group's "
                              "rate commitments")
        threads = int(r["verify_threads"])
        if threads < 0:
            raise ConfigError(f"rln.verify_threads: 0 (one per core but one) or more, got {threads}")
        keystore = config.path("rln.keystore_path") if r["keystore_path"] else ""
        return cls(
            rules=Rules(epoch_s=epoch_s, max_clock_gap_s=float(r["max_clock_gap_s"]), rln_identifier=identifier,
                        nullifier_rule=rule),
            pubsub_topics=tuple(str(t) for t in r["pubsub_topics"] if str(t)),
            membership=membership,
            eth_client_addresses=clients,
            eth_contract_address=contract,
            chain_id=chain_id,
            eth_private_key=str(r["eth_private_key"]),
            keystore_path=keystore,
            keystore_password=str(r["keystore_password"]),
            membership_index=int(r["membership_index"]),
            user_message_limit=limit,
            acceptable_root_window=window,
            root_poll_s=float(r["root_poll_s"]),
            static_rate_commitments=tuple(commitments),
            prove_lightpush=bool(r["prove_lightpush"]),
            rpc_timeout_s=float(r["rpc_timeout_s"]),
            verify_threads=threads,
        )


def contract_of(rln: Mapping[str, Any], cluster_id: int) -> tuple[str, int]:
    """The membership contract and its chain id (0: the endpoint's) of the [rln] section: on
    cluster 1 an empty rln.eth_contract_address is The Waku Network's (Linea Sepolia)."""
    contract, chain_id = str(rln["eth_contract_address"]), int(rln["chain_id"])
    if cluster_id == TWN_CLUSTER and not contract:
        return TWN_CONTRACT, chain_id or TWN_CHAIN_ID
    return contract, chain_id


def _field(key: str, text: str) -> bytes:
    """A field element given as a uint256 (0x-prefixed hex, big-endian, or decimal) -> 32 B LE."""
    try:
        value = int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        raise ConfigError(f"{key}: expected a 0x-prefixed hex or decimal number, got {text!r}") from None
    if not 0 <= value < 1 << 256:
        raise ConfigError(f"{key}: out of range")
    return value.to_bytes(32, "little")
