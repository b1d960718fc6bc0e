"""13/WAKU2-STORE 2.0.0-beta2 (/vac/waku/store/2.0.0-beta2): wire codec, the server the bridge
mounts (answers from the Delta store through ingest/store/reader.py) and a client."""
from ingest.store.codec import STORE_CODEC

__all__ = ["STORE_CODEC"]
