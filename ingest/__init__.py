"""The ingest bridge: a libp2p node on Waku relay that produces every valid WakuMessage to Kafka.

One package per protocol (``relay/``), plus the Kafka producer glue, the node that assembles
them, identity, metrics, the publisher and the ``waku-bridge`` command line.
"""
