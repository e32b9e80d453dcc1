"""HTTP servers of the tests on 127.0.0.1, each served from a daemon thread."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def serve_on_loopback(handler: type[BaseHTTPRequestHandler], port: int = 0, **attributes: Any) -> ThreadingHTTPServer:
    """Serve ``handler`` on 127.0.0.1:``port`` (0: a free port) from a daemon thread; each of ``attributes`` is set on
    the server, where a handler finds it (``self.server.<name>``). Stop it with :func:`stop_serving`."""
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    for name, value in attributes.items():
        setattr(server, name, value)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


def stop_serving(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()
