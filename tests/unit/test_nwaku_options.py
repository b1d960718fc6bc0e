"""nwaku's options (ingest/nwaku_options.py): precedence, booleans, repeats, refusals, ports-shift,
and the BridgeSettings `waku-bridge run` builds from them (no node started)."""
import shlex
import tomllib

import pytest

from core.config import load_config
from ingest import cli
from ingest.nwaku_options import OPTIONS, translate


def overrides(argv, environ=None, **kw):
    t = translate(shlex.split(argv) if isinstance(argv, str) else argv, environ or {}, **kw)
    assert t.errors == (), t.errors
    return dict(o.split("=", 1) for o in t.overrides)


def errors(argv, environ=None, **kw):
    return translate(shlex.split(argv), environ or {}, **kw).errors


# -- precedence -------------------------------------------------------------------------------


def test_command_line_over_environment_over_config_file(tmp_path):
    conf = tmp_path / "node.toml"
    conf.write_text('tcp-port = 61000\nrest-port = 9001\nmetrics-server-port = 9002\nrelay = true\n')
    env = {"WAKUNODE2_REST_PORT": "9101", "WAKUNODE2_METRICS_SERVER_PORT": "9102"}
    got = overrides(f"--config-file={conf} --metrics-server-port=9202", env)
    assert got["bridge.tcp_port"] == "61000"  # config file only
    assert got["rest.port"] == "9101"  # environment over config file
    assert got["bridge.metrics_port"] == "9202"  # command line over both


def test_config_file_from_the_environment(tmp_path):
    conf = tmp_path / "node.toml"
    conf.write_text('cluster-id = 7\nshard = [1, 2]\n')
    got = overrides([], {"WAKUNODE2_CONFIG_FILE": str(conf)})
    assert got["bridge.cluster_id"] == "7"
    assert got["bridge.pubsub_topics"] == "/waku/2/rs/7/1,/waku/2/rs/7/2"


def test_config_file_unknown_key_and_missing_file(tmp_path):
    conf = tmp_path / "node.toml"
    conf.write_text('no-such-option = 1\n')
    assert errors(f"--config-file={conf}") == (f"config file {conf}: Unrecognized option 'no-such-option'",)
    missing = tmp_path / "missing.toml"
    assert errors(f"--config-file={missing}") == (f"--config-file: no such file: {missing}",)


def test_our_set_wins_over_nwaku_options_which_win_over_waku_environment():
    args = cli.parse_args(["run", "--tcp-port=61000", "--rest-port=9000", "--set", "rest.port=9500"])
    env = {"WAKU_BRIDGE__TCP_PORT": "62000", "WAKU_REST__PORT": "9600"}
    config = cli.run_config(args, env)
    assert config.get("bridge.tcp_port") == 61000  # nwaku option over WAKU_*
    assert config.get("rest.port") == 9500  # --set over the nwaku option


# -- booleans, option words -------------------------------------------------------------------


@pytest.mark.parametrize("word,value", [("--store", "true"), ("--store=True", "true"), ("--store=FALSE", "false"),
                                        ("--store:yes", "true"), ("--store=off", "false"), ("--store=1", "true"),
                                        ("--Store=0", "false"), ("--store= false", "false")])
def test_booleans(word, value):
    assert overrides(shlex.split(word))["store_service.enabled"] == value


def test_a_bad_boolean_is_one_line():
    assert errors("--filter=maybe") == (
        "Error while processing the filter=maybe parameter: 'maybe' is not a valid boolean value. "
        "Supported values are on/off, yes/no, true/false or 1/0",)


def test_environment_booleans_and_values():
    env = {"WAKUNODE2_FILTER": "False", "WAKUNODE2_LIGHTPUSH": "true", "WAKUNODE2_TCP_PORT": "30304",
           "WAKUNODE2_NODEKEY": "0x" + "11" * 32, "UNRELATED": "x", "WAKUNODE2_NOT_AN_OPTION": "1"}
    got = overrides([], env)
    assert got["filter.enabled"] == "false"
    assert got["bridge.lightpush_enabled"] == "true"
    assert got["bridge.tcp_port"] == "30304"
    assert got["bridge.nodekey"] == "11" * 32


def test_value_as_the_next_word_and_names_ignore_case():
    got = overrides("--tcp-port 30304 --REST-PORT=9000 --Cluster-Id=3")
    assert got["bridge.tcp_port"] == "30304"
    assert got["rest.port"] == "9000"
    assert got["bridge.cluster_id"] == "3"
    assert errors("--cluster_id=3") == ("Unrecognized option 'cluster_id'",)  # as nwaku: `_` is not `-`


def test_a_bare_boolean_does_not_take_the_next_word():
    assert errors("--relay true") == ("wakunode2 does not accept arguments ('true')",)


def test_unknown_option_is_nwakus_one_line():
    assert errors("--relay=true --no-such-thing=1") == ("Unrecognized option 'no-such-thing'",)


def test_unknown_option_exits_1_with_one_line(capsys):
    assert cli.main(["run", "--relay=true", "--bogus"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == ["Unrecognized option 'bogus'"]


def test_bad_integer():
    assert errors("--tcp-port=abc") == ("Error while processing the tcp-port=abc parameter: invalid integer: abc",)
    assert "invalid port" in errors("--tcp-port=70000")[0]


# -- repeatable options -----------------------------------------------------------------------


def test_repeatable_options_collect_and_a_higher_layer_replaces():
    peer_id = "16Uiu2HAmPLe7Mzm8TsYUubgCAW1aJoeFScxrLj8ppHFivPo97bUZ"
    a, b, c = (f"/ip4/10.0.0.{i}/tcp/60000/p2p/{peer_id}" for i in (1, 2, 3))
    got = overrides([f"--staticnode={a}", f"--staticnode={b}", "--shard=0", "--shard=3", "--cluster-id=5"])
    assert got["bridge.static_peers"] == f"{a},{b}"
    assert got["bridge.pubsub_topics"] == "/waku/2/rs/5/0,/waku/2/rs/5/3"
    env = {"WAKUNODE2_STATICNODE": f'["{a}", "{b}"]', "WAKUNODE2_REST_ALLOW_ORIGIN": "localhost:*,example.org"}
    assert overrides([], env)["bridge.static_peers"] == f"{a},{b}"
    assert overrides([], env)["rest.allow_origins"] == "localhost:*,example.org"
    assert overrides([f"--staticnode={c}"], env)["bridge.static_peers"] == c


def test_pubsub_topics_and_content_topics():
    got = overrides("--pubsub-topic=/waku/2/rs/0/1 --pubsub-topic=/waku/2/default-waku/proto")
    assert got["bridge.pubsub_topics"] == "/waku/2/rs/0/1,/waku/2/default-waku/proto"
    from core.topics import autoshard
    shard = autoshard("/toychat/2/huilong/proto", 8)
    got = overrides("--cluster-id=1 --content-topic=/toychat/2/huilong/proto")
    assert got["bridge.pubsub_topics"] == f"/waku/2/rs/1/{shard}"
    assert errors("--cluster-id=1 --shard=8") == ("--shard=8: expected 0-7 (8 shards in cluster 1)",)
    # nwaku's REST cache holds its --content-topic list from start (auto/messages reads them).
    got = overrides("--cluster-id=2 --shard=0 --content-topic=/myapp/1/latest/proto "
                    "--content-topic=/toychat/2/huilong/proto")
    assert got["rest.content_topics"] == "/myapp/1/latest/proto,/toychat/2/huilong/proto"
    assert "rest.content_topics" not in overrides("--cluster-id=2 --shard=0")


def test_cluster_2_takes_any_static_shard_below_1024():
    """The suite's test_single_pubsub_topic starts nwaku with --cluster-id=2 --shard=0 --shard=1
    --shard=999: nwaku starts (no --num-shards-in-network: v0.35 allows 1024 shards, v0.38 is
    statically sharded); The Waku Network's 8 and an explicit --num-shards-in-network still bound it."""
    got = overrides("--cluster-id=2 --shard=0 --shard=1 --shard=999")
    assert got["bridge.pubsub_topics"] == "/waku/2/rs/2/0,/waku/2/rs/2/1,/waku/2/rs/2/999"
    assert errors("--cluster-id=2 --shard=1024") == ("--shard=1024: expected 0-1023",)
    assert errors("--cluster-id=2 --num-shards-in-network=8 --shard=8") == \
        ("--shard=8: expected 0-7 (8 shards in cluster 2)",)
    assert errors("--preset=twn --shard=999") == ("--shard=999: expected 0-7 (8 shards in cluster 1)",)


def test_an_autosharded_cluster_without_shards_joins_all():
    got = overrides("--cluster-id=1")
    assert (got["bridge.all_shards"], got["bridge.pubsub_topics"], got["bridge.num_shards_in_cluster"]) \
        == ("true", "", "8")
    got = overrides("--cluster-id=16 --num-shards-in-network=32")
    assert (got["bridge.all_shards"], got["bridge.num_shards_in_cluster"]) == ("true", "32")
    assert "bridge.all_shards" not in overrides("--cluster-id=16")  # static sharding: our topics stay


# -- refusals and ignored options -------------------------------------------------------------


def test_db_url_is_refused_naming_our_store_without_its_password():
    (line,) = errors("--store-message-db-url=postgres://user:secret@postgres:5432/postgres",
                     base={"warehouse.root": "s3a://bucket/waku"})
    assert "Delta table `messages` under warehouse.root (s3a://bucket/waku)" in line
    assert "secret" not in line and "\n" not in line


def test_retention_policy():
    got = overrides("--store-message-retention-policy=time:86400")
    assert float(got["store.retention_days"]) == 1.0
    got = overrides("--store-message-retention-policy=time:3600;capacity:100")
    assert float(got["store.retention_days"]) == pytest.approx(1 / 24)
    assert got["store.retention_max_messages"] == "100"
    (line,) = errors("--store-message-retention-policy=size:1GB")
    assert line.startswith("--store-message-retention-policy=size:1GB: the store has no size bound")


@pytest.mark.parametrize("argv,start", [
    ("--mix=true", "--mix=true: no mix protocol"),
    ("--store-sync", "--store-sync: no store sync"),
    ("--peer-exchange-node=/ip4/1.2.3.4/tcp/1", "--peer-exchange-node="),
    ("--nat=upnp", "--nat=upnp: no UPnP"),
    ("--mode=Edge", "--mode=Edge: this node is a service node"),
    ("generateRlnKeystore", "generateRlnKeystore: use `waku-bridge rln-keystore`"),
    ("--rln-relay-eth-client-address=wss://x.example.org", "Error while processing the rln-relay-eth-client-address"),
])
def test_refused(argv, start):
    (line,) = errors(argv)
    assert line.startswith(start), line


def test_harmless_options_are_accepted_and_listed_once():
    t = translate(shlex.split("--keep-alive=true --relay-peer-exchange=true --dns-discovery=true "
                              "--dns-discovery-url=enrtree://X@example.org --agent-string=x "
                              "--relay=true --mix=false --metrics-logging=true"), {})
    assert t.errors == () and t.overrides == ()
    names = [line.split(":")[0] for line in t.ignored]
    assert names == ["--keep-alive", "--relay-peer-exchange", "--dns-discovery", "--dns-discovery-url",
                     "--agent-string", "--metrics-logging"]


def test_max_connections_and_peer_store_capacity_are_the_bridges():
    t = translate(["--max-connections=150"], {})
    assert t.errors == () and t.overrides == ("bridge.max_connections=150",)
    (line,) = errors("--max-connections=0")
    assert "max-connections" in line and "at least 1" in line
    t = translate(["--peer-store-capacity=5000"], {})
    assert t.errors == () and t.overrides == ("bridge.peer_store_capacity=5000",)


def test_log_level():
    assert translate(["--log-level=TRACE"], {}).log_level == "DEBUG"
    assert translate(["--log-level=warn"], {}).log_level == "WARNING"
    assert translate([], {}).log_level is None


# -- ports, addresses, peers, RLN -------------------------------------------------------------


def test_ports_shift_moves_every_port_from_any_layer():
    got = overrides("--ports-shift=10 --tcp-port=30304 --discv5-discovery=true",
                    base={"bridge.ws_port": 8100, "bridge.metrics_port": -1})
    assert got["bridge.tcp_port"] == "30314"
    assert got["bridge.ws_port"] == "8110"  # our (site) setting, shifted
    assert got["rest.port"] == "8655"
    assert got["bridge.discv5_port"] == "9010"  # nwaku's default, turned on, shifted
    assert "bridge.metrics_port" not in got  # off stays off
    args = cli.parse_args(["run", "--ports-shift=1", "--set", "bridge.tcp_port=61000"])
    config = cli.run_config(args, {})
    assert (config.get("bridge.tcp_port"), config.get("bridge.ws_port")) == (61000, 8001)  # --set as given


def test_nat_extip_and_domain_announce():
    got = overrides("--nat=extip:1.2.3.4 --tcp-port=30304 --websocket-support=true --websocket-port=8001")
    assert got["bridge.announce"] == "/ip4/1.2.3.4/tcp/30304,/ip4/1.2.3.4/tcp/8001/ws"
    got = overrides("--nat=extip:1.2.3.4 --tcp-port=30304 --websocket-secure-support=true "
                    "--dns4-domain-name=node.example.org")
    assert (got["bridge.wss_port"], got["bridge.ws_port"]) == ("8000", "-1")
    assert got["bridge.announce"] == ("/ip4/1.2.3.4/tcp/30304,/dns4/node.example.org/tcp/30304,"
                                      "/dns4/node.example.org/tcp/8000/wss")
    assert overrides("--websocket-support=false")["bridge.ws_port"] == "-1"


def test_client_peers_and_metrics_and_rest():
    peer = "/ip4/10.0.0.1/tcp/60000/p2p/16Uiu2HAmPLe7Mzm8TsYUubgCAW1aJoeFScxrLj8ppHFivPo97bUZ"
    got = overrides(f"--storenode={peer} --filternode={peer} --lightpushnode={peer} --metrics-server=false "
                    "--rest --rest-address=0.0.0.0 --rest-admin=true --rest-allow-origin=localhost:*")
    assert got["bridge.store_node"] == got["bridge.lightpush_node"] == peer
    assert got["rest.filter_peer"] == peer
    assert got["bridge.metrics_port"] == "-1"
    assert (got["rest.enabled"], got["rest.address"], got["rest.admin"], got["rest.allow_origins"]) \
        == ("true", "0.0.0.0", "true", "localhost:*")


def test_rln_options_map_onto_the_rln_section():
    got = overrides("--rln-relay=true --rln-relay-dynamic=false --rln-relay-eth-client-address=http://a:8545 "
                    "--rln-relay-eth-client-address=https://b.example.org/rpc "
                    "--rln-relay-eth-contract-address=0xB9cd --rln-relay-chain-id=59141 "
                    "--rln-relay-cred-path=/keystore/keystore.json --rln-relay-cred-password=pw "
                    "--rln-relay-membership-index=3 --rln-relay-user-message-limit=20 --rln-relay-epoch-sec=60 "
                    "--rln-relay-eth-private-key=0xabc")
    config = load_config([f"{k}={v}" for k, v in got.items()], environ={})
    want = {
        "enabled": "true", "membership": "static", "eth_client_address": ["http://a:8545", "https://b.example.org/rpc"],
        "eth_contract_address": "0xB9cd", "chain_id": 59141, "keystore_path": "/keystore/keystore.json",
        "keystore_password": "pw", "membership_index": 3, "user_message_limit": 20, "epoch_s": 60,
        "eth_private_key": "0xabc"}
    assert {k: config["rln"][k] for k in want} == want


def test_every_override_names_a_key_of_our_configuration():
    got = overrides("--cluster-id=1 --shard=0 --rest --store --filter --lightpush --peer-exchange "
                    "--max-msg-size=150KiB --filter-subscription-timeout=60 --filter-max-peers-to-serve=10 "
                    "--filter-max-criteria=10 --listen-address=0.0.0.0 --metrics-server-address=0.0.0.0 "
                    "--rest-relay-cache-capacity=10 --discv5-discovery --discv5-bootstrap-node=enr:-x "
                    "--nat=extip:1.2.3.4 --dns4-domain-name=a.example.org --mode=Core --rln-relay")
    load_config([f"{k}={v}" for k, v in got.items()], environ={})  # an unknown key would raise
    assert got["limits.max_message_bytes"] == "153600"


def test_every_option_is_handled():
    """Each option is mapped (named in the module's code), ignored or refused: none falls through."""
    import inspect

    from ingest import nwaku_options as m
    source = inspect.getsource(m._Mapper)
    unhandled = [name for name in OPTIONS if name not in m.IGNORED and name not in m.REFUSED
                 and name not in m.REFUSED_IF_TRUE and f'"{name}"' not in source and name != "config-file"]
    assert unhandled == []


# -- what waku-bridge run builds ----------------------------------------------------------------


def test_run_builds_the_expected_bridge_settings():
    s = cli.bridge_settings(["run", "--cluster-id=1", "--shard=0", "--relay=true", "--tcp-port=30304",
                             "--rln-relay=false", "--rest=true", "--rest-port=8646", "--store=false", "--filter=True"],
                            environ={})
    assert s.cluster_id == 1 and s.num_shards_in_cluster == 8
    assert s.pubsub_topics == ("/waku/2/rs/1/0",)
    assert s.tcp_port == 30304
    assert s.store is None and s.filter is not None
    assert s.rest is not None and s.rest.port == 8646


def test_wakunode2_is_a_console_script():
    scripts = tomllib.loads((cli_repo() / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["wakunode2"] == "ingest.cli:wakunode2_main"


def cli_repo():
    from core.config import REPO_ROOT
    return REPO_ROOT


def test_nwaku_compose_command_line_without_its_refused_options(tmp_path):
    """run_node.sh's command line (nwaku-compose), its db URL and size retention dropped."""
    key, cert = tmp_path / "privkey.pem", tmp_path / "fullchain.pem"
    key.write_text("k")
    cert.write_text("c")
    line = ("--relay=true --filter=true --peer-exchange=true --lightpush=true --keep-alive=true "
            "--max-connections=150 --cluster-id=1 --discv5-discovery=true --discv5-udp-port=9005 "
            "--discv5-enr-auto-update=True --log-level=DEBUG --tcp-port=30304 --metrics-server=True "
            "--metrics-server-port=8003 --metrics-server-address=0.0.0.0 --rest=true --rest-admin=true "
            "--rest-address=0.0.0.0 --rest-port=8645 --rest-allow-origin=waku-org.github.io "
            "--rest-allow-origin=localhost:* --nat=extip:203.0.113.7 --store=true "
            "--rln-relay-eth-client-address=https://linea-sepolia.example.org/v3/key "
            "--rln-relay-cred-path=/keystore/keystore.json --rln-relay-cred-password=pw "
            "--websocket-support=true --websocket-secure-support=true "
            f"--websocket-secure-cert-path={cert} --websocket-secure-key-path={key} "
            "--dns4-domain-name=node.example.org --nodekey=" + "22" * 32)
    s = cli.bridge_settings(["run", *shlex.split(line)], environ={})
    assert (s.cluster_id, s.tcp_port, s.wss_port, s.ws_port, s.metrics_port) == (1, 30304, 8000, -1, 8003)
    assert s.max_connections == 150
    assert len(s.pubsub_topics) == 8 and s.discv5 is not None and s.discv5.port == 9005
    assert [str(a) for a in s.announce] == ["/ip4/203.0.113.7/tcp/30304", "/dns4/node.example.org/tcp/30304",
                                            "/dns4/node.example.org/tcp/8000/wss"]
    assert s.rest is not None and s.rest.admin and s.rest.allow_origins == ("waku-org.github.io", "localhost:*")
    refused = errors(line + " --store-message-db-url=postgres://u:p@postgres:5432/postgres "
                            "--store-message-retention-policy=size:1GB")
    assert len(refused) == 2


def test_relay_false_is_a_light_node():
    assert overrides("--relay=false")["bridge.relay"] == "false"
    assert "bridge.relay" not in overrides("--relay=True")
