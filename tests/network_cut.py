"""A TCP relay in front of a server whose link can be cut, as a network partition cuts it.

Once :meth:`CuttableLink.cut` is called, bytes sent either way are swallowed and new
connections are accepted but never answered: neither side hears of the cut, as when a cable or
a firewall drops packets silently (a closed socket would be noticed at once). :meth:`heal`
lets traffic through again on connections made after it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit, urlunsplit

__all__ = ["CuttableLink"]


class CuttableLink:
    """Relays ``127.0.0.1:<port>`` to the server of ``dsn``; ``dsn`` of the link goes through it."""

    def __init__(self, dsn: str) -> None:
        parts = urlsplit(dsn)
        self._target = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._listener = socket.create_server(("127.0.0.1", 0))
        port = self._listener.getsockname()[1]
        self.dsn = urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{port}"))
        self._cut = threading.Event()
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, name="link-accept", daemon=True).start()

    def cut(self) -> None:
        """From now on nothing passes, and nobody is told."""
        self._cut.set()

    def heal(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._sockets.append(client)
            if self._cut.is_set():
                continue  # accepted by the kernel, never answered
            try:
                upstream = socket.create_connection(self._target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            self._sockets.append(upstream)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=self._relay, args=(source, sink), name="link-relay", daemon=True
                ).start()

    def _relay(self, source: socket.socket, sink: socket.socket) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                if not self._cut.is_set():  # across a cut, not even the end is heard
                    with contextlib.suppress(OSError):
                        sink.shutdown(socket.SHUT_WR)
                return
            if self._cut.is_set():
                continue  # dropped on the floor
            try:
                sink.sendall(data)
            except OSError:
                return
