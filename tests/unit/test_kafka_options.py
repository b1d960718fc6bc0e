"""kafka.client_options (the Java client's names, as Spark takes them) reach each Python client
in its own form: kafka-python's keyword arguments, librdkafka's properties (the store tail)."""
from __future__ import annotations

import pytest

from core.config import ConfigError, load_config
from core.kafka import client_options, librdkafka_options
from ingest.store.tail import Tail, TailFollower, TailSettings


def site_options(tmp_path, items: str):
    """kafka.client_options as an operator writes them in a site file (docs/operations.md)."""
    site = tmp_path / "site.toml"
    site.write_text(f"[kafka]\nclient_options = {items}\n")
    return load_config(config_file=str(site), environ={}).kafka_client_options()


def test_the_java_clients_sasl_settings_reach_kafka_python_and_librdkafka(tmp_path):
    # TOML literal strings ('...') keep the JAAS line's double quotes as they are.
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="waku" password="s3 cret";'
    options = site_options(tmp_path, f"""['security.protocol=SASL_SSL', 'sasl.mechanism=SCRAM-SHA-512',
        'sasl.jaas.config={jaas}']""")
    assert client_options(options) == {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                                       "sasl_plain_username": "waku", "sasl_plain_password": 's3 cret'}
    assert librdkafka_options(options) == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                           "sasl.username": "waku", "sasl.password": 's3 cret'}


def test_a_jaas_config_without_credentials_is_refused_with_the_settings_name(tmp_path):
    with pytest.raises(ConfigError, match="kafka.client_options: sasl.jaas.config"):
        site_options(tmp_path,
                     '["sasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;"]')


def test_an_option_librdkafka_does_not_know_stops_the_tail_at_start_naming_it():
    settings = TailSettings("127.0.0.1:1", client_options={"ssl.cafile": "/etc/kafka/ca.pem"})
    follower = TailFollower(settings, Tail(10), lambda hashes: set())
    with pytest.raises(ConfigError, match="kafka.client_options: .*ssl.cafile"):
        follower.start()
    follower.stop()


def test_the_bridge_refuses_at_start_a_name_kafka_python_has_no_setting_for(tmp_path):
    """kafka-python refuses an unknown name only when a client is created, and the bridge's
    producer took that for Kafka being down ("cannot reach", retrying for ever)."""
    from ingest.settings import BridgeSettings

    site = tmp_path / "site.toml"
    site.write_text('[kafka]\nclient_options = ["security.protocol=SSL", '
                    '"ssl.truststore.location=/etc/kafka/ca.jks"]\n')
    with pytest.raises(ConfigError, match="kafka-python.* has no setting ssl.truststore.location"):
        BridgeSettings.from_config(load_config(config_file=str(site), environ={}))
    assert client_options({"ssl.check.hostname": "false", "request.timeout.ms": "5000"}) == \
        {"ssl_check_hostname": False, "request_timeout_ms": 5000}
