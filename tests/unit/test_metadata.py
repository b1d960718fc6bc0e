"""Metadata: the wire form the reference clients read (shards unpacked in field 2 for nwaku and
js-waku, packed in field 3 for go-waku), both decoded; the cluster rule; autosharding as the
reference nodes compute it; the bridge's announced shards from its settings."""
from __future__ import annotations

import pytest

from core.config import ConfigError, load_config
from core.topics import autoshard, content_topic_parts, static_shard
from ingest.metadata import codec
from ingest.metadata.protocol import NodeShards, keep_peer
from ingest.settings import BridgeSettings, node_shards
from schemas import metadata_pb2 as pb
from tests.unit.test_schemas import wire_fields


def test_shards_are_written_unpacked_and_packed():
    data = codec.response(1, [3, 0, 7])
    fields = wire_fields(data)
    assert (1, 0, 1) in fields
    # field 2: one varint per shard (wire type 0), not a packed blob (wire type 2)
    assert [(n, w, v) for n, w, v in fields if n == 2] == [(2, 0, 0), (2, 0, 3), (2, 0, 7)]
    # field 3: packed, as go-waku >= 0.9 reads it
    assert [(n, w, v) for n, w, v in fields if n == 3] == [(3, 2, bytes([0, 3, 7]))]
    assert codec.decode(data) == (1, (0, 3, 7))


def test_decoding_accepts_both_forms_and_a_missing_cluster():
    packed2 = bytes([0x08, 0x01, 0x12, 0x02, 0x04, 0x05])  # cluster 1, field 2 packed [4, 5]
    assert codec.decode(packed2) == (1, (4, 5))
    only3 = pb.WakuMetadataResponse(shards_packed=[6]).SerializeToString()
    assert codec.decode(only3) == (None, (6,))
    assert codec.decode(b"") == (None, ())
    assert codec.decode(codec.request(2, [1]), pb.WakuMetadataRequest) == (2, (1,))


def test_cluster_rule():
    ours = NodeShards(1, (0, 1))
    assert keep_peer(ours, 1) is None
    assert keep_peer(ours, 2) == "cluster 2, ours 1"
    assert keep_peer(ours, None) == "no cluster id"
    assert keep_peer(NodeShards(0), 5) is None  # cluster 0: nothing checked


def test_autosharding_matches_the_reference_nodes():
    # go-waku's own test vector (waku/v2/protocol/topic_test.go): /toychat/2/huilong/proto -> shard 3
    assert autoshard("/toychat/2/huilong/proto", 8) == 3
    assert autoshard("/0/toychat/2/huilong/proto", 8) == 3
    assert autoshard("/1/toychat/2/huilong/proto", 8) is None  # only generation 0
    assert autoshard("not-a-topic", 8) is None and autoshard("/a/b/c", 8) is None
    assert content_topic_parts("/app/1/chat/proto") == (0, "app", "1", "chat", "proto")
    # every content topic of an app version lands on one shard
    assert len({autoshard(f"/app/1/{name}/proto", 8) for name in ("a", "b", "c", "d")}) == 1
    assert static_shard("/waku/2/rs/1/7") == (1, 7) and static_shard("/waku/2/default-waku/proto") is None


def test_bridge_announces_the_shards_it_joined():
    cfg = load_config(["bridge.cluster_id=1", "rln.enabled=false", "bridge.pubsub_topics=", "bridge.all_shards=true"],
                       environ={})
    s = BridgeSettings.from_config(cfg)
    assert s.pubsub_topics == tuple(f"/waku/2/rs/1/{i}" for i in range(8))
    assert node_shards(s) == NodeShards(1, tuple(range(8)))
    s = BridgeSettings.from_config(load_config(
        ["bridge.cluster_id=1", "rln.enabled=false", "bridge.pubsub_topics=/waku/2/rs/1/5,/waku/2/rs/1/2"], environ={}))
    assert node_shards(s) == NodeShards(1, (2, 5))
    assert node_shards(BridgeSettings.from_config(load_config([], environ={}))) == NodeShards(0, ())
    with pytest.raises(ConfigError, match="not a shard of bridge.cluster_id 1"):
        BridgeSettings.from_config(load_config(["bridge.cluster_id=1", "rln.enabled=false",
                                                "bridge.pubsub_topics=/waku/2/rs/2/0"],
                                               environ={}))
    with pytest.raises(ConfigError, match="bridge.cluster_id"):
        BridgeSettings.from_config(load_config(["bridge.cluster_id=70000"], environ={}))
