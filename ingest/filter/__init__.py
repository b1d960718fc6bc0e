"""12/WAKU2-FILTER on the bridge: filter-subscribe v2 and legacy v00 servers, the pusher that
sends what the Spark filter job matched, and a filter client (docs/filter-service.md).

Modules: ``codec`` (protocol ids, framing, status codes), ``state`` (the bridge's view of its
own peers' subscriptions, limits), ``server`` (filter-subscribe v2), ``legacy`` (v00),
``pusher`` (waku.push.<bridge_id> -> filter-push), ``service`` (assembles them in the node),
``client`` (library and ``waku-bridge filter``).
"""
