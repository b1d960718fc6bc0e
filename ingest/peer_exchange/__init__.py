"""34/WAKU2-PEER-EXCHANGE server (/vac/waku/peer-exchange/2.0.0-alpha1): `codec`, `protocol`
(pure: which ENRs answer a query), `service` (the stream handler, rate limit, metrics)."""
