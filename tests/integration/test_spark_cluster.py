"""tools/spark_cluster.py: the standalone cluster starts when a port it picked is taken before
its JVM binds it (the master then used to move to the next port, and the workers, told the
picked one, never registered: "waiting for 2 workers ... aliveworkers 0")."""
from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import tools.spark_cluster as spark_cluster
from tools.spark_cluster import StandaloneCluster

pytestmark = pytest.mark.integration


def race_for_port(monkeypatch, taken: int, at: tuple[int, ...]) -> list[int]:
    """Make the cluster's port picks hand out `taken` at the given pick positions (as if
    another process bound it between the pick and the JVM's bind); returns the picks."""
    picked: list[int] = []
    pick = spark_cluster.free_port

    def racing_pick(host: str = "127.0.0.1") -> int:
        port = taken if len(picked) in at else pick(host)
        picked.append(port)
        return port

    monkeypatch.setattr(spark_cluster, "free_port", racing_pick)
    return picked


def relaunch_messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "launching it again" in r.getMessage()]


def one_worker_cluster(tmp_path) -> StandaloneCluster:
    return StandaloneCluster(tmp_path / "spark", workers=1, worker_cores=1, worker_memory="512m")


def test_a_daemon_whose_port_is_taken_is_launched_again_on_another(tmp_path, monkeypatch, caplog):
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    taken = held.getsockname()[1]
    # Picks: the master's port and web UI port (1st launch: the port is taken), again (2nd
    # launch), then the worker's web UI port (taken).
    race_for_port(monkeypatch, taken, at=(0, 4))
    cluster = one_worker_cluster(tmp_path)
    try:
        cluster.start(timeout=180)
        state = cluster.state()
        assert state["aliveworkers"] == 1
        assert state["url"] == cluster.url and cluster.port != taken
        assert cluster.worker_webui_ports[0] != taken
        assert cluster.worker_state(0)["masterurl"] == cluster.url
    finally:
        cluster.stop()
        held.close()
    relaunched = relaunch_messages(caplog)
    assert len(relaunched) == 2 and "master" in relaunched[0] and "worker-0" in relaunched[1], relaunched


def test_a_master_whose_web_ui_port_another_server_answers_on_is_launched_again(tmp_path, monkeypatch, caplog):
    """Seen in CI: another application's Spark UI took the web UI port picked for the master and
    answered its /json with HTML; the start failed parsing it."""

    class Html(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<!DOCTYPE html><html><body>another Spark UI</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    other = ThreadingHTTPServer(("127.0.0.1", 0), Html)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    taken = other.server_address[1]
    race_for_port(monkeypatch, taken, at=(1,))  # picks: the master's port, then its web UI port
    cluster = one_worker_cluster(tmp_path)
    try:
        cluster.start(timeout=180)
        assert cluster.webui_port != taken
        assert cluster.state()["aliveworkers"] == 1
    finally:
        cluster.stop()
        other.shutdown()
        other.server_close()
    relaunched = relaunch_messages(caplog)
    assert len(relaunched) == 1 and "master" in relaunched[0], relaunched
