"""RLN-v2 relay validation (nwaku's waku_rln_relay): credentials keystore, proofs, membership."""
