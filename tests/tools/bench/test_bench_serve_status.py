"""`mavias bench serve`'s load clients and probes record a dropped connection as a status and go on, so one reset
under load neither kills a client thread unseen nor ends the bench in a traceback."""

import socket
import threading

from mavias.tools.bench.serve import http_status


def test_a_connection_closed_without_an_answer_is_a_status():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def close_one() -> None:
        connection, _ = listener.accept()
        connection.recv(1024)
        connection.close()

    closer = threading.Thread(target=close_one, daemon=True)
    closer.start()
    status = http_status(f"http://127.0.0.1:{port}/v2/health/live")
    closer.join(timeout=10)
    listener.close()
    assert isinstance(status, str) and status.startswith("error: ")


def test_a_server_that_is_gone_is_a_status():
    with socket.create_server(("127.0.0.1", 0)) as gone:
        port = gone.getsockname()[1]
    assert http_status(f"http://127.0.0.1:{port}/v2/health/live") == "error: ConnectionRefusedError"
