"""The metrics endpoint: prometheus_client's WSGI app (text or OpenMetrics as the scraper asks,
gzip where it accepts it) on a threading wsgiref server, serving from a thread of its own.

The engine's loop only binds, starts and closes it; each scrape runs on a handler thread of the
server and reads the engine's latest metrics snapshot through the registry's collector, so a
slow or stuck scraper holds a handler thread, never the loop. Binding happens on the caller's
thread, so a port in use is an OSError there, at once.
"""

from __future__ import annotations

import logging
import socket
import threading
from socketserver import TCPServer, ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, make_wsgi_app

from gpudesk.core.listen import ListenAddress

log = logging.getLogger("gpudesk.engine")

POLL_S = 0.1  # how soon the serving thread notices close(): the most close() waits for it
REQUEST_TIMEOUT_S = 30.0  # a scraper that connects and sends nothing is dropped after this


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape in engine.log (one every scrape interval, for ever)."""

    timeout = REQUEST_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape in flight does not keep the engine from exiting
    block_on_close = False

    def server_bind(self) -> None:
        """As WSGIServer's, without its socket.getfqdn(): a reverse DNS lookup on the engine's
        loop, which a slow resolver would stall for seconds. The name only fills SERVER_NAME."""
        TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)
        self.setup_environ()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A scraper that hung up or sent garbage: its problem, not a traceback in engine.log.
        log.debug("metrics: a request from %s failed", client_address, exc_info=True)


class MetricsServer:
    """Serves `registry` on `address` from the moment it is built until `close()`."""

    def __init__(self, address: ListenAddress, registry: CollectorRegistry) -> None:
        server_class = type(
            "_Server6" if address.ipv6 else "_Server4",
            (_Server,),
            {"address_family": socket.AF_INET6 if address.ipv6 else socket.AF_INET},
        )
        self._server: _Server = server_class((address.host, address.port), _QuietHandler)
        self._server.set_app(make_wsgi_app(registry))
        self.address = ListenAddress(address.host, int(self._server.server_address[1]))
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": POLL_S},
            name="gpudesk-metrics",
            daemon=True,
        )
        self._thread.start()

    @property
    def url(self) -> str:
        """Where Prometheus scrapes it: the bound address (the real port when 0 was asked)."""
        return f"http://{self.address.text()}/metrics"

    def close(self) -> None:
        """Stop serving and free the port (waits at most about POLL_S for the thread)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=1.0)
