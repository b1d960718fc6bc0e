"""nwaku's command line, read as our configuration: `waku-bridge run` and `wakunode2` take the
options nwaku's `wakunode2` takes (nwaku-compose's run_node.sh, the interop suite), so a node
started by them runs unchanged here (docs/operations.md, "In place of nwaku").

`translate(argv, environ, base)` is pure: nwaku's option words and its `WAKUNODE2_<OPTION>`
environment (and the TOML file `--config-file` names, read through `read_toml`) in, and out the
`section.key=value` overrides of core/config.load_config, the options accepted but ignored (one
line each, for the log) and the refusals (one line each). Layers as nwaku's: the command line
over the environment over the config file; a repeatable option given in a higher layer replaces
its values from a lower one. `base` holds the values of our own layers that a nwaku option
combines with (ports for --ports-shift, the cluster and shard count, warehouse.root for the
refusal of --store-message-db-url).

Option words as nwaku's parser (confutils) reads them: `--name=value` or `--name:value`, names
case-insensitive, `_` ignored; a boolean alone is true (`--relay`), its values are true/false,
yes/no, on/off, 1/0 in any case (`--relay=True`); an unknown name is `Unrecognized option 'name'`.
A value may also follow as the next word (`--tcp-port 60000`), which nwaku does not accept.
"""
from __future__ import annotations

import ipaddress
import json
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.topics import autoshard, check_pubsub_topic, shard_topic

ENV_PREFIX = "WAKUNODE2_"
CONFIG_FILE_OPTION = "config-file"
NWAKU_DEFAULT_PORTS = {"tcp-port": 60000, "websocket-port": 8000, "rest-port": 8645,
                       "metrics-server-port": 8008, "discv5-udp-port": 9000}

# What `base` holds when the caller gives nothing: conf/pipeline.toml's defaults.
BASE_DEFAULTS: Mapping[str, Any] = {
    "bridge.tcp_port": 60000, "bridge.ws_port": 8000, "bridge.wss_port": -1, "bridge.metrics_port": 8008,
    "bridge.discv5_port": -1, "rest.port": 8645, "bridge.cluster_id": 0, "bridge.num_shards_in_cluster": 8,
    "warehouse.root": "var/warehouse",
}

BOOL, INT, UINT, PORT, STR = "bool", "int", "uint", "port", "str"


@dataclass(frozen=True)
class Option:
    kind: str
    repeatable: bool = False


def _opts(kind: str, names: str, repeatable: bool = False) -> dict[str, Option]:
    return {name: Option(kind, repeatable) for name in names.split()}


# Every option of nwaku v0.30 to v0.38 (tools/confutils/cli_args.nim, earlier
# waku/factory/external_config.nim) and what it is for us.
OPTIONS: dict[str, Option] = {
    **_opts(BOOL, "relay filter store lightpush peer-exchange rest rest-admin rest-private metrics-server "
                  "metrics-logging discv5-enr-auto-update discv5-only websocket-support websocket-secure-support "
                  "ext-multiaddr-only keep-alive relay-peer-exchange relay-shard-manager relay-client "
                  "peer-persistence dns-discovery reliability rendezvous mix enable-kad-discovery "
                  "store-message-db-vacuum store-message-db-migration store-resume store-sync legacy-store "
                  "execute rln-relay rln-relay-dynamic"),
    **_opts(BOOL, "discv5-discovery"),
    **_opts(UINT, "cluster-id num-shards-in-network ports-shift rln-relay-chain-id rln-relay-membership-index "
                  "rln-relay-user-message-limit rln-relay-epoch-sec rest-relay-cache-capacity "
                  "filter-subscription-timeout filter-max-peers-to-serve filter-max-criteria "
                  "store-max-num-db-connections store-sync-interval store-sync-range store-sync-relay-jitter "
                  "store-sync-max-payload-size discv5-table-ip-limit discv5-bucket-ip-limit "
                  "rln-relay-bandwidth-threshold request-rate-limit request-rate-period"),
    **_opts(INT, "max-connections ip-colocation-limit peer-store-capacity max-relay-peers discv5-bits-per-hop"),
    **_opts(PORT, "tcp-port websocket-port rest-port metrics-server-port discv5-udp-port"),
    **_opts(STR, "config-file log-level log-format mode preset agent-string nodekey listen-address nat "
                 "relay-service-ratio dns4-domain-name storenode filternode lightpushnode peer-exchange-node "
                 "store-message-retention-policy store-message-db-url rest-address metrics-server-address "
                 "dns-discovery-url websocket-secure-key-path websocket-secure-cert-path max-msg-size mixkey "
                 "rln-relay-cred-path rln-relay-cred-password rln-relay-eth-contract-address "
                 "rln-relay-eth-private-key rln-relay-tree-path rln-relay-id-key rln-relay-id-commitment-key"),
    **_opts(UINT, "shard", repeatable=True),
    **_opts(STR, "staticnode pubsub-topic content-topic entry-node ext-multiaddr rest-allow-origin "
                 "discv5-bootstrap-node dns-addrs-name-server dns-discovery-name-server dns-addrs protected-shard "
                 "protected-topic rate-limit rln-relay-eth-client-address mixnode kad-bootstrap-node topic",
            repeatable=True),
}
_BY_STYLE = {name.replace("_", "").lower(): name for name in OPTIONS}

# Accepted, with no effect here; why, for the one log line each gets.
IGNORED: dict[str, str] = {
    "keep-alive": "connections are kept alive always",
    "relay-peer-exchange": "gossipsub's peer exchange on prune is not used",
    "relay-shard-manager": "no shard-aware peer manager",
    "relay-service-ratio": "no split of connections between relay and service peers",
    "ip-colocation-limit": "no per-IP connection cap",
    "peer-persistence": "peers are not persisted (bridge.static_peers are dialled at each start)",
    "max-relay-peers": "no relay peer cap",
    "agent-string": "identify announces py-libp2p's agent",
    "log-format": "logs are text lines",
    "metrics-logging": "metrics are served, not logged",
    "dns-discovery": "no DNS discovery (EIP-1459): give peers as --staticnode or --discv5-bootstrap-node",
    "dns-discovery-url": "no DNS discovery (EIP-1459): give peers as --staticnode or --discv5-bootstrap-node",
    "dns-discovery-name-server": "no DNS discovery",
    "dns-addrs-name-server": "names in multiaddrs are resolved by the system resolver",
    "dns-addrs": "names in multiaddrs are resolved by the system resolver",
    "discv5-enr-auto-update": "the ENR's address is the announced one (--nat=extip:, --dns4-domain-name)",
    "discv5-table-ip-limit": "discv5's table has no per-IP limit setting",
    "discv5-bucket-ip-limit": "discv5's table has no per-IP limit setting",
    "discv5-bits-per-hop": "discv5 lookups are fixed",
    "reliability": "no store-based reliability client",
    "rendezvous": "no rendezvous server",
    "rate-limit": "limits are bridge.lightpush_per_peer_per_s, bridge.peer_exchange_per_s, "
                  "filter.max_requests_per_peer_per_minute, store_service.max_queries_per_peer_per_s",
    "request-rate-limit": "limits are our own settings (see --rate-limit)",
    "request-rate-period": "limits are our own settings (see --rate-limit)",
    "store-message-db-vacuum": "the store is a Delta table (VACUUM: the maintain job)",
    "store-message-db-migration": "the store is a Delta table (its schema: core/tables.py)",
    "store-max-num-db-connections": "the store is a Delta table, no database connections",
    "store-sync-interval": "no store sync", "store-sync-range": "no store sync",
    "store-sync-relay-jitter": "no store sync", "store-sync-max-payload-size": "no store sync",
    "legacy-store": "store 2.0.0-beta2 and v3 are both served (store_service.enabled)",
    "rest-private": "no private REST routes",
    "mixkey": "no mix protocol", "mixnode": "no mix protocol",
    "kad-bootstrap-node": "no kademlia discovery",
    "execute": "no RLN keystore command",
    "rln-relay-tree-path": "no RLN tree on disk", "rln-relay-bandwidth-threshold": "no RLN bandwidth threshold",
    "rln-relay-id-key": "RLN credentials come from the keystore (--rln-relay-cred-path)",
    "rln-relay-id-commitment-key": "RLN credentials come from the keystore (--rln-relay-cred-path)",
}

# Given as true, a feature we do not have: refused with this line.
REFUSED_IF_TRUE: dict[str, str] = {
    "relay-client": "no circuit-relay client: the node must be reachable (--nat=extip:, --dns4-domain-name)",
    "mix": "no mix protocol",
    "enable-kad-discovery": "no kademlia discovery (use --discv5-discovery)",
    "store-resume": "no store resume: the store is fed by Kafka, which holds what was relayed while it was down",
    "store-sync": "no store sync protocol",
    "discv5-only": "discovered peers are always dialled",
}
# Refused whatever their value.
REFUSED: dict[str, str] = {
    "protected-shard": "no signed-shard validation",
    "protected-topic": "no signed-shard validation",
    "peer-exchange-node": "no peer-exchange client (this node serves peer exchange: --peer-exchange)",
}
# Never repeated in a message (a database URL holds its password).
SECRET = frozenset({"store-message-db-url", "rln-relay-cred-password", "rln-relay-eth-private-key", "nodekey"})
_LOG_LEVELS = {"trace": "DEBUG", "debug": "DEBUG", "info": "INFO", "notice": "INFO", "warn": "WARNING",
               "warning": "WARNING", "error": "ERROR", "fatal": "CRITICAL"}
_TRUE, _FALSE = ("y", "yes", "true", "1", "on"), ("n", "no", "false", "0", "off")


@dataclass(frozen=True)
class Translation:
    overrides: tuple[str, ...]  # section.key=value, for load_config (before our own --set)
    ignored: tuple[str, ...]  # "--name: why", one log line each
    errors: tuple[str, ...]  # one line each; any of them: the node does not start
    log_level: str | None = None  # --log-level as a Python logging level name
    version: bool = False  # --version was given


class _Layer:
    """The options of one source, as strings (lists for repeatable ones)."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.values: dict[str, Any] = {}

    def add(self, name: str, raw: str) -> None:
        if OPTIONS[name].repeatable:
            self.values.setdefault(name, []).append(raw)
        else:
            self.values[name] = raw


def _canonical(word: str) -> str | None:
    return _BY_STYLE.get(word.replace("_", "").lower())


def _command_line(argv: Sequence[str], errors: list[str]) -> tuple[_Layer, bool]:
    layer = _Layer("command line")
    version = False
    words = list(argv)
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-") or word in ("-", "--"):
            if word == "generateRlnKeystore":
                errors.append("generateRlnKeystore: use `waku-bridge rln-keystore` (the same keystore; "
                              "docs/rln.md), then --rln-relay-cred-path")
            else:
                errors.append(f"wakunode2 does not accept arguments ({word!r})")
            continue
        body = word.lstrip("-")
        match = re.match(r"([^:=\s]*)\s*(?:[:=]\s*(.*))?$", body, re.S)
        key, raw = (match.group(1), match.group(2)) if match else (body, None)
        if key.lower() == "version":
            version = True
            continue
        name = _canonical(key)
        if name is None:
            errors.append(f"Unrecognized option '{key}'")
            continue
        takes_next = i < len(words) and not words[i].startswith("-")
        if raw is None:  # `--relay` alone (true); a value-taking option takes the next word
            raw = ""
            if OPTIONS[name].kind != BOOL and takes_next:
                raw, i = words[i], i + 1
        elif raw == "" and takes_next:  # nwaku's `--name= value`
            raw, i = words[i], i + 1
        layer.add(name, raw)
    return layer, version


def _environment(environ: Mapping[str, str]) -> _Layer:
    layer = _Layer("environment")
    for name, spec in OPTIONS.items():
        var = ENV_PREFIX + name.upper().replace("-", "_")
        if var not in environ:
            continue
        raw = environ[var]
        if spec.repeatable:
            for item in _env_list(raw):
                layer.add(name, item)
            layer.values.setdefault(name, [])
        else:
            layer.add(name, raw)
    return layer


def _env_list(raw: str) -> list[str]:
    """A repeatable option from the environment: a JSON array (nwaku's form) or comma-separated."""
    text = raw.strip()
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError:
            items = None
        if isinstance(items, list):
            return [_toml_text(item) for item in items]
    return [item.strip() for item in text.split(",") if item.strip()]


def _toml_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _config_file(path: str, read_toml: Callable[[str], Mapping[str, Any]], errors: list[str]) -> _Layer:
    layer = _Layer(f"config file {path}")
    try:
        values = read_toml(path)
    except FileNotFoundError:
        errors.append(f"--config-file: no such file: {path}")
        return layer
    except (OSError, tomllib.TOMLDecodeError) as exc:
        errors.append(f"--config-file {path}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        return layer
    for key, value in values.items():
        name = _canonical(key)
        if name is None or name == CONFIG_FILE_OPTION:
            errors.append(f"config file {path}: Unrecognized option '{key}'")
            continue
        items = value if isinstance(value, list) else [value]
        if not OPTIONS[name].repeatable and isinstance(value, list):
            errors.append(f"config file {path}: {key}: expected one value, got a list")
            continue
        if isinstance(value, dict):
            errors.append(f"config file {path}: {key}: expected a value, got a table")
            continue
        layer.values[name] = [_toml_text(v) for v in items] if OPTIONS[name].repeatable else _toml_text(value)
    return layer


def _read_toml(path: str) -> Mapping[str, Any]:
    with open(path, "rb") as fh:
        return tomllib.load(fh)


class _Values:
    """The merged options, converted to their types; a bad value becomes an error line."""

    def __init__(self, layers: Sequence[_Layer], errors: list[str]) -> None:
        self.raw: dict[str, tuple[Any, str]] = {}
        for layer in layers:  # lowest first: a later layer replaces
            for name, value in layer.values.items():
                self.raw[name] = (value, layer.origin)
        self.errors = errors
        self.typed: dict[str, Any] = {}
        for name, (value, origin) in self.raw.items():
            spec = OPTIONS[name]
            items = value if spec.repeatable else [value]
            converted = [self._convert(name, spec.kind, str(v), origin) for v in items]
            if any(c is None for c in converted):
                continue
            self.typed[name] = converted if spec.repeatable else converted[0]

    def _convert(self, name: str, kind: str, raw: str, origin: str) -> Any:
        text = raw.strip()

        def bad(why: str) -> None:
            where = "" if origin == "command line" else f" (from {origin})"
            self.errors.append(f"Error while processing the {name}={raw} parameter: {why}{where}")

        if kind == BOOL:
            lowered = text.replace("_", "").lower()
            if lowered == "" or lowered in _TRUE:
                return True
            if lowered in _FALSE:
                return False
            return bad(f"'{raw}' is not a valid boolean value. Supported values are on/off, yes/no, "
                       "true/false or 1/0")
        if kind in (INT, UINT, PORT):
            try:
                number = int(text)
            except ValueError:
                return bad(f"invalid integer: {raw}")
            if kind != INT and number < 0:
                return bad(f"invalid unsigned integer: {raw}")
            if kind == PORT and number > 65535:
                return bad(f"invalid port: {raw}")
            return number
        return raw

    def has(self, name: str) -> bool:
        return name in self.typed

    def get(self, name: str, default: Any = None) -> Any:
        return self.typed.get(name, default)


def translate(
    argv: Sequence[str],
    environ: Mapping[str, str],
    base: Mapping[str, Any] | None = None,
    read_toml: Callable[[str], Mapping[str, Any]] = _read_toml,
) -> Translation:
    """nwaku's options (argv: the words after `waku-bridge run` that are not ours) and
    WAKUNODE2_* (environ) as our overrides; see the module docstring."""
    errors: list[str] = []
    cli, version = _command_line(argv, errors)
    env = _environment(environ)
    layers = [env, cli]
    config_file = cli.values.get(CONFIG_FILE_OPTION) or env.values.get(CONFIG_FILE_OPTION)
    if config_file:
        layers.insert(0, _config_file(str(config_file), read_toml, errors))
    values = _Values(layers, errors)
    if errors and any(e.startswith("Unrecognized option") for e in errors):
        errors.sort(key=lambda e: not e.startswith("Unrecognized option"))
    out = _Mapper(values, {**BASE_DEFAULTS, **(base or {})}, errors)
    out.map_all()
    return Translation(tuple(f"{k}={v}" for k, v in out.overrides.items()), tuple(out.ignored), tuple(errors),
                       out.log_level, version)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


class _Mapper:
    def __init__(self, values: _Values, base: Mapping[str, Any], errors: list[str]) -> None:
        self.v = values
        self.base = base
        self.errors = errors
        self.overrides: dict[str, str] = {}
        self.ignored: list[str] = []
        self.log_level: str | None = None

    def put(self, key: str, value: Any) -> None:
        self.overrides[key] = _text(value)

    def refuse(self, name: str, why: str) -> None:
        if name in SECRET:
            self.errors.append(f"--{name}: {why}")
            return
        value = self.v.raw.get(name, ("", ""))[0]
        shown = ",".join(value) if isinstance(value, list) else value
        self.errors.append(f"--{name}={shown}: {why}" if shown else f"--{name}: {why}")

    def ignore(self, name: str, why: str) -> None:
        self.ignored.append(f"--{name}: ignored, {why}")

    def map_all(self) -> None:
        v = self.v
        for name in v.typed:
            if name in IGNORED:
                self.ignore(name, IGNORED[name])
            elif name in REFUSED:
                self.refuse(name, REFUSED[name])
            elif name in REFUSED_IF_TRUE and v.get(name) is True:
                self.refuse(name, REFUSED_IF_TRUE[name])
        if v.get("relay") is False:  # a light node that only uses services (bridge.relay)
            self.put("bridge.relay", "false")
        self._mode()
        self._services()
        self._network()
        self._ports_and_addresses()
        self._peers()
        self._store()
        self._rln()
        self._logging()

    def _mode(self) -> None:
        mode = str(self.v.get("mode", "")).strip().lower()
        if not mode or mode == "nomode":
            return
        if mode == "core":
            for key in ("filter.enabled", "bridge.lightpush_enabled", "bridge.peer_exchange_enabled"):
                self.put(key, True)
            if not self.v.has("discv5-discovery"):
                self.v.typed["discv5-discovery"] = True
        elif mode == "edge":
            self.refuse("mode", "this node is a service node: it relays and serves (no edge mode)")
        else:
            self.refuse("mode", "expected Core or Edge")

    def _services(self) -> None:
        v = self.v
        for name, key in (("filter", "filter.enabled"), ("store", "store_service.enabled"),
                          ("lightpush", "bridge.lightpush_enabled"), ("peer-exchange", "bridge.peer_exchange_enabled"),
                          ("rest", "rest.enabled"), ("rest-admin", "rest.admin"),
                          ("rest-relay-cache-capacity", "rest.relay_cache_capacity"),
                          ("filter-subscription-timeout", "filter.subscription_ttl_s"),
                          ("filter-max-peers-to-serve", "filter.max_peers"),
                          ("filter-max-criteria", "filter.max_criteria_per_peer"),
                          ("rest-allow-origin", "rest.allow_origins")):
            if v.has(name):
                self.put(key, v.get(name))
        for name, key in (("rest-address", "rest.address"), ("metrics-server-address", "bridge.metrics_host"),
                          ("listen-address", "bridge.listen_host")):
            if v.has(name):
                address = str(v.get(name)).strip()
                try:
                    ipaddress.ip_address(address)
                except ValueError:
                    self.refuse(name, "expected an IP address")
                    continue
                self.put(key, address)
        for name, key in (("peer-store-capacity", "bridge.peer_store_capacity"),
                          ("max-connections", "bridge.max_connections")):
            if v.has(name):
                if v.get(name) < 1:
                    self.refuse(name, "expected at least 1")
                else:
                    self.put(key, v.get(name))
        if v.has("max-msg-size"):
            size = _message_size(str(v.get("max-msg-size")))
            if size is None:
                self.refuse("max-msg-size", "expected a size such as 150KiB, 150KB or 153600B")
            else:
                self.put("limits.max_message_bytes", size)

    def _network(self) -> None:
        v = self.v
        preset = str(v.get("preset", "")).strip().lower()
        cluster = int(self.base["bridge.cluster_id"])
        if v.has("cluster-id"):
            cluster = v.get("cluster-id")
            if cluster > 65535:
                self.refuse("cluster-id", "expected 0-65535")
                return
        if preset == "twn":
            cluster = 1
        elif preset in ("logos.dev", "logosdev"):
            cluster = 2
            self.ignored.append("--preset=logos.dev: its mix and kademlia discovery are not served here")
        elif preset:
            self.errors.append(f"Error determining cluster from preset: Invalid --preset value passed: {preset}")
            return
        if v.has("cluster-id") or preset:
            self.put("bridge.cluster_id", cluster)
        # nwaku: cluster 1 (The Waku Network) and 2 (Logos Dev) are autosharded over 8 shards.
        shards_n = int(self.base["bridge.num_shards_in_cluster"])
        auto = False
        if v.get("num-shards-in-network", 0) > 0:
            shards_n, auto = v.get("num-shards-in-network"), True
        elif (v.has("cluster-id") or preset) and cluster in (1, 2) and not v.has("num-shards-in-network"):
            shards_n, auto = 8, True
        if auto:
            if shards_n > 1024:
                self.refuse("num-shards-in-network", "expected 1-1024")
                return
            self.put("bridge.num_shards_in_cluster", shards_n)
        # The shard ids --shard takes: below --num-shards-in-network, or 8 under a preset (The Waku
        # Network's, nwaku's validateShards); a cluster 2 given by --cluster-id alone takes any
        # static shard id below 1024 as nwaku (v0.35: 1024 shards without --num-shards-in-network;
        # v0.38: static sharding), its content topics still autosharded over 8.
        bound = shards_n if auto and (v.get("num-shards-in-network", 0) > 0 or cluster == 1 or preset) else 1024
        topics: list[str] = []
        for shard in v.get("shard", []):
            if auto and shard >= bound:
                self.errors.append(f"--shard={shard}: expected 0-{bound - 1} "
                                   f"({shards_n} shards in cluster {cluster})" if bound == shards_n
                                   else f"--shard={shard}: expected 0-{bound - 1}")
                continue
            topics.append(shard_topic(cluster, shard))
        for topic in [*v.get("pubsub-topic", []), *v.get("topic", [])]:
            why = check_pubsub_topic(topic)
            if why:
                self.errors.append(f"--pubsub-topic={topic}: {why}")
            topics.append(topic)
        content_topics: list[str] = []
        for content_topic in v.get("content-topic", []):
            if not auto:
                self.ignored.append(f"--content-topic={content_topic}: ignored, no shard to derive it from under "
                                    "static sharding (give --shard or --num-shards-in-network)")
                continue
            shard = autoshard(content_topic, shards_n)
            if shard is None:
                self.errors.append(f"--content-topic={content_topic}: not a content topic "
                                   "/{application}/{version}/{topic-name}/{encoding}")
                continue
            topics.append(shard_topic(cluster, shard))
            content_topics.append(content_topic)
        if content_topics:  # nwaku's REST cache subscribes to them at start
            self.put("rest.content_topics", list(dict.fromkeys(content_topics)))
        if topics:
            self.put("bridge.pubsub_topics", list(dict.fromkeys(topics)))
            self.put("bridge.all_shards", False)
        elif auto:  # nwaku: all shards of an autosharded cluster by default
            self.put("bridge.pubsub_topics", [])
            self.put("bridge.all_shards", True)

    def _ports_and_addresses(self) -> None:
        v = self.v
        shift = v.get("ports-shift", 0)
        base = self.base

        def port(name: str, key: str, enabled: bool | None) -> int:
            """The port of a listener: -1 when turned off; the nwaku option, else our setting (nwaku's
            default where ours is off and the option turns it on), plus --ports-shift (0 and -1 stay)."""
            if enabled is False:
                value = -1
            elif v.has(name):
                value = v.get(name)
            elif enabled and int(base[key]) < 0:
                value = NWAKU_DEFAULT_PORTS[name]
            else:
                value = int(base[key])
            if value > 0 and shift:
                value += shift
                if value > 65535:
                    self.errors.append(f"--ports-shift={shift}: {key} {value - shift} + {shift} is above 65535")
            if v.has(name) or enabled is not None or value != int(base[key]):
                self.put(key, value)
            return value

        tcp = port("tcp-port", "bridge.tcp_port", None)
        secure, ws_on = v.get("websocket-secure-support"), v.get("websocket-support")
        if secure:  # nwaku serves wss on the websocket port, instead of ws
            wss = port("websocket-port", "bridge.wss_port", True)
            ws = port("websocket-port", "bridge.ws_port", False)
        else:
            ws = port("websocket-port", "bridge.ws_port", ws_on)
            wss = port("", "bridge.wss_port", False if secure is False else None)
        for name, key in (("websocket-secure-key-path", "bridge.tls_key_file"),
                          ("websocket-secure-cert-path", "bridge.tls_cert_file")):
            if v.has(name):
                self.put(key, v.get(name))
        port("rest-port", "rest.port", None)
        port("metrics-server-port", "bridge.metrics_port", v.get("metrics-server"))
        discv5 = v.get("discv5-discovery")
        if discv5 is None and v.has("discv5-udp-port") and int(base["bridge.discv5_port"]) < 0:
            self.ignore("discv5-udp-port", "discv5 is off (--discv5-discovery=true turns it on)")
            del self.v.typed["discv5-udp-port"]
        port("discv5-udp-port", "bridge.discv5_port", discv5)
        self._announce(tcp, ws, wss)

    def _announce(self, tcp: int, ws: int, wss: int) -> None:
        v = self.v
        extip: str | None = None
        if v.has("nat"):
            nat = str(v.get("nat")).strip()
            lowered = nat.lower()
            if lowered.startswith("extip:"):
                extip = nat[len("extip:"):].strip()
                try:
                    if ipaddress.ip_address(extip).version != 4:
                        raise ValueError(extip)
                except ValueError:
                    self.refuse("nat", "expected extip:<IPv4 address>")
                    return
            elif lowered in ("any", "none"):
                self.ignore("nat", "no UPnP or NAT-PMP: the announced addresses are the listen ones "
                                   "(--nat=extip:<ip> or --dns4-domain-name to set them)")
            elif lowered in ("upnp", "pmp"):
                self.refuse("nat", "no UPnP or NAT-PMP port mapping here; give the public address as "
                                   "--nat=extip:<ip> and forward the ports")
                return
            else:
                self.refuse("nat", "must be one of: any, none, upnp, pmp, extip:<IP>")
                return
        domain = str(v.get("dns4-domain-name", "")).strip()
        extra = [str(a) for a in v.get("ext-multiaddr", [])]
        if not (extip or domain or extra):
            return
        addrs: list[str] = []
        if not v.get("ext-multiaddr-only", False):
            if extip and tcp > 0:
                addrs.append(f"/ip4/{extip}/tcp/{tcp}")
            hosts = [f"/dns4/{domain}"] if domain else [f"/ip4/{extip}"] if extip else []
            for host in hosts:
                if domain and tcp > 0:
                    addrs.append(f"{host}/tcp/{tcp}")
                if ws > 0:
                    addrs.append(f"{host}/tcp/{ws}/ws")
                if wss > 0:
                    addrs.append(f"{host}/tcp/{wss}/wss")
        addrs.extend(extra)
        self.put("bridge.announce", list(dict.fromkeys(addrs)))

    def _peers(self) -> None:
        v = self.v
        static = list(v.get("staticnode", []))
        bootstrap = list(v.get("discv5-bootstrap-node", []))
        for entry in v.get("entry-node", []):
            text = str(entry).strip()
            if text.startswith("enrtree:"):
                self.ignored.append(f"--entry-node={text}: ignored, no DNS discovery (EIP-1459)")
            elif text.startswith("enr:"):
                bootstrap.append(text)
                static.append(text)
            else:
                static.append(text)
        if static or v.has("staticnode"):
            self.put("bridge.static_peers", list(dict.fromkeys(static)))
        if bootstrap or v.has("discv5-bootstrap-node"):
            self.put("bridge.discv5_bootstrap", list(dict.fromkeys(bootstrap)))
        if v.has("nodekey"):
            self.put("bridge.nodekey", str(v.get("nodekey")).strip().removeprefix("0x"))
        for name, key in (("storenode", "bridge.store_node"), ("lightpushnode", "bridge.lightpush_node")):
            if v.has(name):
                self.put(key, str(v.get(name)).strip())
        if v.has("filternode"):  # the REST API's /filter/v2 routes' service peer
            self.put("rest.filter_peer", str(v.get("filternode")).strip())

    def _store(self) -> None:
        v = self.v
        if v.has("store-message-db-url"):
            self.refuse("store-message-db-url", f"the store is the Delta table `messages` under warehouse.root "
                                                f"({self.base['warehouse.root']}), no database: drop this option")
        if not v.has("store-message-retention-policy"):
            return
        policy = str(v.get("store-message-retention-policy")).strip()
        for part in (p.strip().lower() for p in policy.split(";") if p.strip()):
            kind, _, arg = part.partition(":")
            if kind == "time" and arg.isdigit() and int(arg) > 0:
                self.put("store.retention_days", int(arg) / 86400.0)
            elif kind == "capacity" and arg.isdigit() and int(arg) > 0:
                self.put("store.retention_max_messages", int(arg))
            elif kind == "size":
                self.refuse("store-message-retention-policy",
                            "the store has no size bound; use time:<seconds> (store.retention_days) or "
                            "capacity:<messages> (store.retention_max_messages)")
            elif part == "none":
                self.refuse("store-message-retention-policy",
                            "the store always has a time bound (store.retention_days); give time:<seconds>")
            else:
                self.refuse("store-message-retention-policy",
                            f"invalid 'store message retention policy' format: {part}")

    def _rln(self) -> None:
        v = self.v
        if v.has("rln-relay"):
            self.put("rln.enabled", "true" if v.get("rln-relay") else "false")
        if v.has("rln-relay-dynamic"):
            self.put("rln.membership", "chain" if v.get("rln-relay-dynamic") else "static")
        if v.has("rln-relay-eth-client-address"):
            urls = [str(u).strip() for u in v.get("rln-relay-eth-client-address")]
            for url in urls:
                if not re.match(r"^https?://", url) or "," in url:
                    self.errors.append(f"Error while processing the rln-relay-eth-client-address={url} parameter: "
                                       + ("Websocket RPC URL is not supported, Please use an HTTP URL"
                                          if re.match(r"^wss?://", url) else "Invalid HTTP RPC URL"))
            self.put("rln.eth_client_address", urls)
        for name, key in (("rln-relay-eth-contract-address", "rln.eth_contract_address"),
                          ("rln-relay-chain-id", "rln.chain_id"), ("rln-relay-cred-path", "rln.keystore_path"),
                          ("rln-relay-cred-password", "rln.keystore_password"),
                          ("rln-relay-membership-index", "rln.membership_index"),
                          ("rln-relay-user-message-limit", "rln.user_message_limit"),
                          ("rln-relay-epoch-sec", "rln.epoch_s"), ("rln-relay-eth-private-key", "rln.eth_private_key")):
            if v.has(name):
                self.put(key, v.get(name))

    def _logging(self) -> None:
        if self.v.has("log-level"):
            level = _LOG_LEVELS.get(str(self.v.get("log-level")).strip().lower().removeprefix("loglevel."))
            if level is None:
                self.refuse("log-level", "expected TRACE, DEBUG, INFO, NOTICE, WARN, ERROR or FATAL")
            self.log_level = level


def _message_size(text: str) -> int | None:
    """nwaku's --max-msg-size: a number and B, KB (1000) or KiB (1024), e.g. 150KiB."""
    match = re.fullmatch(r"\s*(\d+(?:[.,]\d*)?)\s*([Kk]?[i]?[Bb])\s*", text)
    if not match or match.group(2).lower() == "ib":
        return None
    value = float(match.group(1).replace(",", "."))
    unit = match.group(2).lower()
    return int(value * (1000 if unit == "kb" else 1024 if unit == "kib" else 1))

