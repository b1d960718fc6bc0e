"""Node Discovery v5.1 (devp2p discv5), written to the spec (no maintained Python library):
`codec` (packets, the handshake's cryptography, messages), `table` (k-buckets), `protocol`
(pure: datagram + state -> packets to send, what happened), `service` (the trio UDP socket,
requests, lookups for Waku relay peers). docs/discovery.md."""
