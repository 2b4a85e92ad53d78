"""A real HTTP server on 127.0.0.1 in a thread (http.server), for the tests of captures by
URL: it serves a directory and records each request's method, path and Range header."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def serve(root: Path) -> Iterator[tuple[str, list[tuple[str, str, str | None]]]]:
    """(base URL, the requests seen so far) while `root` is served."""
    seen: list[tuple[str, str, str | None]] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw) -> None:
            super().__init__(*a, directory=str(root), **kw)

        def log_message(self, *args) -> None:  # quiet
            pass

        def send_head(self):  # noqa: ANN201
            seen.append((self.command, self.path, self.headers.get("Range")))
            return super().send_head()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
