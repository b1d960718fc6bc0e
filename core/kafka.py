"""Kafka facts every side shares: client settings in each client's form (kafka-python's
keyword arguments, librdkafka's property names), and the one helper that creates the
pipeline's topics (the embedded broker does not auto-create; a real cluster may not either).

    ensure_topics("k1:9092,k2:9092", {"waku.messages": 4}, client_options={"security.protocol": "SSL"})
"""
from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kafka import KafkaAdminClient

log = logging.getLogger("waku.kafka")

TOPIC_ALREADY_EXISTS = 36


class TopicError(Exception):
    """Topics could not be created or did not become ready; the message is one line."""


_JAAS_CREDENTIAL = re.compile(r'\b(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')


def jaas_credentials(value: str) -> tuple[str, str]:
    """(username, password) of a Java client's `sasl.jaas.config` (a PLAIN or SCRAM login
    module: `... required username="waku" password="...";`)."""
    found = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS_CREDENTIAL.findall(value)}
    if set(found) != {"username", "password"}:
        raise ValueError('kafka.client_options: sasl.jaas.config: expected username="..." password="..." '
                         "(a PLAIN or SCRAM login module)")
    return found["username"], found["password"]


_BOOLEANS = {"true": True, "false": False}


def client_options(options: Mapping[str, str]) -> dict[str, str | int | bool]:
    """kafka.client_options (the Java client's names, as Spark takes them: security.protocol=SSL)
    as kafka-python kwargs: dots become underscores, numbers and true/false their values, and
    `sasl.jaas.config` becomes
    sasl_plain_username / sasl_plain_password (kafka-python's names for PLAIN and SCRAM)."""
    out: dict[str, str | int | bool] = {}
    for name, value in options.items():
        if name == "sasl.jaas.config":
            out["sasl_plain_username"], out["sasl_plain_password"] = jaas_credentials(value)
            continue
        key = name.replace(".", "_")
        out[key] = int(value) if value.isdigit() else _BOOLEANS.get(value.lower(), value)
    return out


def unknown_to_kafka_python(options: Mapping[str, str]) -> list[str]:
    """The names in kafka.client_options that kafka-python's producer, consumer or admin client
    has no setting for (kafka-python refuses them when a client is created)."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

    known = set(KafkaProducer.DEFAULT_CONFIG) & set(KafkaConsumer.DEFAULT_CONFIG) & set(KafkaAdminClient.DEFAULT_CONFIG)
    return [name for name in options
            if name != "sasl.jaas.config" and name.replace(".", "_") not in known]


def librdkafka_options(options: Mapping[str, str]) -> dict[str, str]:
    """kafka.client_options (the Java client's names) as librdkafka properties. librdkafka
    shares most names (security.protocol, sasl.mechanism, ssl.keystore.*,
    ssl.endpoint.identification.algorithm); `sasl.jaas.config` becomes sasl.username /
    sasl.password. A name librdkafka does not know is passed as it is: librdkafka refuses it
    when the client is created, naming it."""
    out: dict[str, str] = {}
    for name, value in options.items():
        if name == "sasl.jaas.config":
            out["sasl.username"], out["sasl.password"] = jaas_credentials(value)
        else:
            out[name] = value
    return out


def follower_config(bootstrap_servers: str, name: str, client_options: Mapping[str, str],
                    **extra: Any) -> dict[str, Any]:
    """librdkafka's properties for a consumer that follows partitions it is assigned as records
    arrive (the bridge's store tail and filter pusher), `client.id` and `group.id` `name`,
    `kafka.client_options` and `extra` (a logger, an error callback) included.

    Partitions are assigned, never subscribed: the group joins nothing and commits nothing
    (librdkafka asks for a group id all the same). A fetch is answered as soon as a record is
    there, else after 5 s: idle, one fetch in 5 s (a 10 ms wait made 100 a second, 500 ms 2: the
    broker's main idle work). Every fetch names every partition: librdkafka leaves a partition out
    of a fetch while the consumer's queue holds queued.min.messages (decided per partition, against
    the one queue), and one left out while the loop held records waited for the fetch in flight,
    which the broker holds for the whole 5 s when the partitions it names are idle (one peer's
    pushes share a partition: a push came up to 5 s late). So librdkafka's own thresholds stand
    (100,000 records, 64 MiB: reached only when the loop is that far behind), not 1
    (tests/integration/test_kafka_follow_latency.py; docs/decisions.md). A partition backed off
    after a fetch error (a fresh topic, a leader move) still waits for the fetch in flight: up to
    5 s, once per error."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers, "client.id": name,
        "group.id": name, "enable.auto.commit": False, "enable.auto.offset.store": False,
        "fetch.min.bytes": 1, "fetch.wait.max.ms": 5000,
        "max.partition.fetch.bytes": 4 * 1024 * 1024, "reconnect.backoff.max.ms": 1000,
        **extra,
    }
    config.update(librdkafka_options(client_options))
    return config


def _leader(partition: Mapping[str, Any]) -> int:
    """The leader id in a describe_topics partition entry (key names differ across kafka-python)."""
    leader = partition.get("leader_id", partition.get("leader"))
    return -1 if leader is None else int(leader)


def ensure_topics(
    bootstrap_servers: str | list[str],
    topics: Mapping[str, int],
    *,
    options: Mapping[str, str] | None = None,
    replication: int | None = None,
    min_insync_replicas: int | None = None,
    topic_configs: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
    client_id: str = "waku-admin",
) -> list[str]:
    """Create the missing topics of `topics` (name -> partitions) and wait until every partition
    has a leader. Existing topics are left as they are (a different partition count is logged).
    Replication: 1 against a single bootstrap server, else 3 unless given (the typed form:
    `KafkaSettings.replication_factor`); min.insync.replicas: as given, else 2 with a replication
    of 3 or more (with the producers' acks=all, an acknowledged record is on two brokers), unless
    topic_configs says otherwise; every topic gets
    message.timestamp.type=LogAppendTime (the broker's clock) unless topic_configs says
    otherwise. Returns the names created; raises TopicError with one line on failure."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError

    if not topics:
        return []
    servers = bootstrap_servers.split(",") if isinstance(bootstrap_servers, str) else list(bootstrap_servers)
    if replication is None:
        replication = 1 if len(servers) == 1 else 3
    configs = dict(topic_configs or {})
    # The broker stamps each record when it appends it: the store's rules judge a receive time
    # against that clock (core/validation.py), the same on every side and every replay.
    configs.setdefault("message.timestamp.type", "LogAppendTime")
    if min_insync_replicas is not None:
        configs.setdefault("min.insync.replicas", str(min_insync_replicas))
    elif replication >= 3:
        configs.setdefault("min.insync.replicas", "2")
    try:
        admin = KafkaAdminClient(bootstrap_servers=servers, client_id=client_id,
                                 request_timeout_ms=int(timeout_s * 1000), **client_options(options or {}))
    except KafkaError as exc:
        raise TopicError(f"cannot reach Kafka on {','.join(servers)}: {exc}") from None
    try:
        existing = set(admin.list_topics())
        new = [NewTopic(name, int(n), replication, topic_configs=configs)
               for name, n in topics.items() if name not in existing]
        if new:
            resp = admin.create_topics(new, timeout_ms=int(timeout_s * 1000), raise_errors=False)
            results = resp.get("topics", []) if isinstance(resp, dict) else getattr(resp, "topics", [])
            for result in results:
                code = result.get("error_code", 0) if isinstance(result, dict) else result[1]
                if code not in (0, TOPIC_ALREADY_EXISTS):  # already exists: a concurrent creator
                    name = result.get("name") if isinstance(result, dict) else result[0]
                    message = result.get("error_message") if isinstance(result, dict) else None
                    raise TopicError(f"cannot create topic {name}: {message or f'error code {code}'}")
            log.info("created topics %s", ", ".join(f"{t.name}:{t.num_partitions}" for t in new))
        _wait_for_leaders(admin, topics, time.monotonic() + timeout_s)
        return [t.name for t in new]
    except KafkaError as exc:
        raise TopicError(f"creating topics on {','.join(servers)} failed: {exc}") from None
    finally:
        admin.close()


def _wait_for_leaders(admin: KafkaAdminClient, topics: Mapping[str, int], deadline: float) -> None:
    while True:
        pending = []
        for desc in admin.describe_topics(list(topics)):
            name = desc.get("topic") or desc.get("name")
            parts = desc.get("partitions") or []
            if desc.get("error_code", 0) or not parts or any(_leader(p) < 0 for p in parts):
                pending.append(name)
            elif len(parts) != topics.get(name, len(parts)):
                log.warning("topic %s exists with %d partitions (asked for %d); left as it is",
                            name, len(parts), topics[name])
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TopicError(f"topics without a leader after the timeout: {', '.join(sorted(pending))}")
        time.sleep(0.2)
