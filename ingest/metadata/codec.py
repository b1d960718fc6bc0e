"""Metadata wire facts: the protocol id and the WakuMetadata request/response encodings.

Shards are written twice: field 2 unpacked (nwaku, js-waku; js-waku misreads the packed form)
and field 3 packed (what go-waku >= 0.9 reads). Both are read, packed or not, and merged."""
from __future__ import annotations

from collections.abc import Iterable

from schemas import metadata_pb2 as pb

METADATA_CODEC = "/vac/waku/metadata/1.0.0"
MAX_METADATA_BYTES = 64 * 1024  # a cluster id and at most 1024 shards


def request(cluster_id: int, shards: Iterable[int]) -> bytes:
    s = sorted(set(shards))
    return pb.WakuMetadataRequest(cluster_id=cluster_id, shards=s, shards_packed=s).SerializeToString()


def response(cluster_id: int, shards: Iterable[int]) -> bytes:
    s = sorted(set(shards))
    return pb.WakuMetadataResponse(cluster_id=cluster_id, shards=s, shards_packed=s).SerializeToString()


def decode(data: bytes, kind: type[pb.WakuMetadataRequest] | type[pb.WakuMetadataResponse] = pb.WakuMetadataResponse
           ) -> tuple[int | None, tuple[int, ...]]:
    """(cluster id or None when absent, shards) of a request or response; DecodeError otherwise."""
    msg = kind.FromString(data)
    cluster = msg.cluster_id if msg.HasField("cluster_id") else None
    return cluster, tuple(sorted(set(msg.shards) | set(msg.shards_packed)))
