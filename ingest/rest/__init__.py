"""The Waku REST API (nwaku's `waku/rest_api`) served by the bridge: settings, the pure request
parsing and response encoding (codec), the relay message cache, the ASGI app (starlette) and its
server (hypercorn on the bridge's trio loop). docs/rest.md."""
