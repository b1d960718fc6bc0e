"""Peer exchange wire facts: the protocol id, nwaku's status codes, the RPC encodings."""
from __future__ import annotations

from collections.abc import Sequence

from schemas import peer_exchange_pb2 as pb

PEER_EXCHANGE_CODEC = "/vac/waku/peer-exchange/2.0.0-alpha1"
# nwaku's DefaultMaxRpcSize is 10 WakuMessages plus 64 KiB; a query is a few bytes.
MAX_REQUEST_BYTES = 64 * 1024

# nwaku's PeerExchangeResponseStatusCode
SUCCESS = 200
BAD_REQUEST = 400
TOO_MANY_REQUESTS = 429
SERVICE_UNAVAILABLE = 503


def decode_query(data: bytes) -> int:
    """The number of peers asked for; DecodeError when the bytes are not a PeerExchangeRPC."""
    return pb.PeerExchangeRPC.FromString(data).query.num_peers


def encode_response(enrs: Sequence[bytes], code: int = SUCCESS, desc: str | None = None) -> bytes:
    """A PeerExchangeRPC response as nwaku writes it (go-waku reads the peer infos and ignores
    the status fields)."""
    r = pb.PeerExchangeResponse(peer_infos=[pb.PeerInfo(enr=e) for e in enrs], status_code=code)
    if desc is not None:
        r.status_desc = desc
    return pb.PeerExchangeRPC(response=r).SerializeToString()


def encode_query(num_peers: int) -> bytes:
    return pb.PeerExchangeRPC(query=pb.PeerExchangeQuery(num_peers=num_peers)).SerializeToString()


def decode_response(data: bytes) -> tuple[int, list[bytes]]:
    r = pb.PeerExchangeRPC.FromString(data).response
    return r.status_code, [p.enr for p in r.peer_infos]
