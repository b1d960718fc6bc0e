"""/vac/waku/metadata/1.0.0: the node's cluster id and shards, exchanged with every peer on
connect; peers of another cluster are disconnected, as nwaku and go-waku do."""
