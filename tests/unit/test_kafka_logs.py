"""kafka-python's log storm on a lost broker becomes one line per logger and level a minute."""
from __future__ import annotations

import io
import logging
import time

from ingest.kafka_producer import _KafkaClientLogLimit


def test_a_lost_broker_logs_one_line_per_logger_a_minute():
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(_KafkaClientLogLimit(every_s=0.2))
    lg = logging.getLogger("kafka.net.connection")
    lg.addHandler(handler)
    lg.propagate = False
    try:
        for _ in range(100):
            try:
                raise ConnectionResetError(104, "Connection reset by peer")
            except ConnectionResetError:
                lg.error("Connection lost: KafkaConnectionError", exc_info=True)
        logging.getLogger("ingest.kafka").addHandler(handler)
        logging.getLogger("ingest.kafka").warning("our own line is never limited")
        time.sleep(0.25)
        lg.error("Connection lost again")
    finally:
        lg.removeHandler(handler)
        lg.propagate = True
        logging.getLogger("ingest.kafka").removeHandler(handler)
    lines = out.getvalue().splitlines()
    assert lines == ["Connection lost: KafkaConnectionError (ConnectionResetError)",
                     "our own line is never limited",
                     "Connection lost again [99 similar lines not shown]"]
