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


def test_the_bridge_imports_kafka_python_before_any_thread():
    """kafka-python imported for the first time from two threads at once fails ("partially
    initialized module 'kafka.record'"): the bridge exited 1 at start when its store tail and
    its producer raced (found by tests/benchmarks/faults.py). Importing the bridge imports it."""
    import subprocess
    import sys

    code = "import sys, ingest.node; assert 'kafka.record' in sys.modules and 'kafka.errors' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
