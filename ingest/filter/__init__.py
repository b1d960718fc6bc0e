"""12/WAKU2-FILTER on the bridge: filter-subscribe v2 and legacy v00, the pusher that sends what
the Spark filter job matched, and a filter client (docs/filter-service.md).

Modules: ``codec`` (protocol ids, status codes, push and response encodings), ``state`` (the
bridge's view of its own peers' subscriptions, limits, the changes applied to it),
``protocol`` (the pure request core of v2 and v00: request + view -> response + changes),
``pusher`` (waku.push.<bridge_id> consumer, per-peer de-duplication), ``service`` (stream
handlers, event production, pushes, sweeps: assembles them in the node), ``settings``,
``client`` (library and ``waku-bridge filter``).
"""
