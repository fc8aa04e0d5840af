"""The API served from a thread of the demo process: chDB allows one process per data path,
so the process that owns it serves HTTP, ingests and invoices."""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler, get_internal_wsgi_application


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return


def start_api_server(host: str, port: int) -> tuple[ThreadedWSGIServer, str]:
    """Serve the WSGI app in a daemon thread. Port 0 picks a free port. Returns the server and its URL."""
    logging.getLogger("django.server").setLevel(logging.WARNING)  # not "Broken pipe" when a client leaves
    server = ThreadedWSGIServer((host, port), _QuietHandler, allow_reuse_address=True)
    server.set_app(get_internal_wsgi_application())
    threading.Thread(target=server.serve_forever, name="api-server", daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}"
