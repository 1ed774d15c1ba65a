"""A corpus host on loopback: files served at their real URL layout, /HOST/PATH for https://HOST/PATH
(as a team's corpus mirror serves them: CORPUS_MIRROR=http://127.0.0.1:PORT), with faults to order."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

from pipeline.data import fetch


class CorpusHost:
    """The files under `root` (laid out as fetch.mirror_path lays them), served on a free port."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cut_once: set[str] = set()  # URL paths whose next answer stops halfway through its body
        self.asked: list[str] = []
        host = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=str(root), **kwargs)

            def do_GET(self) -> None:
                host.asked.append(self.path)
                if self.path in host.cut_once:
                    host.cut_once.discard(self.path)
                    body = (root / self.path.lstrip("/")).read_bytes()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body[: len(body) // 2])  # then the connection closes
                    self.close_connection = True
                    return
                super().do_GET()

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def put(self, url: str, body: bytes) -> Path:
        """Serve `body` as the file at https URL `url`; the path it is served at."""
        path = fetch.mirror_path(self.root, url)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
        return path

    def path_of(self, url: str) -> str:
        return fetch.mirror_url("", url)

    @contextlib.contextmanager
    def running(self) -> Iterator[CorpusHost]:
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()
