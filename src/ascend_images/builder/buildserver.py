"""A loopback HTTP server that lives for one build and hands RUN steps what must not be baked in.

The docker SDK drives the classic builder, which has no `--secret` and no `RUN --mount`. Builds run
with the host network, so a RUN can fetch from 127.0.0.1 and delete what it fetched in the same
step: nothing reaches a layer, and `docker history` shows only the server's address.

Served paths:
  /secrets/ca.pem     the extra CA bundle (--ca-bundle)
  /secrets/pip.conf   index, extra indexes (credentials included), trusted hosts, find-links
  /secrets/netrc      credentials for private indexes (--netrc)
  /secrets/os-mirror  the OS package mirror (--os-mirror): its URL, login and password, a line each
  /cann/<file>        a directory of CANN .run packages (--cann-source local)
  /artifacts/<file>   a directory of other downloads: SGLang sources, sgl-kernel-npu zips (--artifacts-dir)
  /wheelhouse/        a directory of wheels, as a find-links listing (--wheelhouse)
"""

from __future__ import annotations

import html
import http.server
import secrets
import sys
import threading
import urllib.parse
from pathlib import Path
from types import TracebackType

from ascend_images.inputs.sources import BuildInputs

# A stable port keeps the ARG value stable, so Docker's layer cache survives between builds.
PREFERRED_PORT = 39517


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        self.server.requests.append(self.path)

    def do_GET(self) -> None:
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        prefix = self.server.prefix
        if not path.startswith(prefix + "/"):
            self.send_error(404)
            return
        rel = path[len(prefix):]
        if rel in self.server.documents:
            self._send_bytes(self.server.documents[rel], "text/plain")
            return
        for mount, directory in self.server.mounts.items():
            if rel == mount + "/":
                self._send_listing(directory, rel)
                return
            if rel.startswith(mount + "/"):
                name = rel[len(mount) + 1:]
                target = directory / name
                # only plain files directly inside the mounted directory
                if "/" in name or not target.is_file():
                    self.send_error(404)
                    return
                self._send_file(target)
                return
        self.send_error(404)

    def _send_bytes(self, data: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_file(self, path: Path) -> None:
        size = path.stat().st_size
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                self.wfile.write(chunk)

    def _send_listing(self, directory: Path, rel: str) -> None:
        links = "".join(
            f'<a href="{html.escape(urllib.parse.quote(p.name))}">{html.escape(p.name)}</a><br>\n'
            for p in sorted(directory.iterdir())
            if p.is_file()
        )
        self._send_bytes(f"<html><body>\n{links}</body></html>\n".encode(), "text/html")


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that went away (a RUN stopped mid-download, a Ctrl-C) is no error of the build's: socketserver
        would print a traceback into the build's output."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)

    def __init__(self, address: tuple[str, int]):
        super().__init__(address, _Handler)
        self.prefix = ""
        self.documents: dict[str, bytes] = {}
        self.mounts: dict[str, Path] = {}
        self.requests: list[str] = []


class BuildServer:
    """Context manager: `with BuildServer(inputs, cann_dir) as server: server.url`."""

    def __init__(self, inputs: BuildInputs, cann_dir: Path | None = None, artifacts_dir: Path | None = None,
                 port: int = PREFERRED_PORT):
        self.inputs = inputs
        self.cann_dir = cann_dir
        self.artifacts_dir = artifacts_dir
        self.port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}{self._server.prefix}"

    @property
    def requests(self) -> list[str]:
        return list(self._server.requests) if self._server else []

    def _bind(self) -> _Server:
        try:
            return _Server(("127.0.0.1", self.port))
        except OSError:
            return _Server(("127.0.0.1", 0))

    def __enter__(self) -> BuildServer:
        server = self._bind()
        # credentials get an unguessable path; without them a stable URL keeps the layer cache
        server.prefix = f"/{secrets.token_urlsafe(16)}" if self.inputs.has_credentials else ""
        self._server = server
        if self.inputs.ca_bundle is not None:
            server.documents["/secrets/ca.pem"] = self.inputs.ca_bundle.read_bytes()
        netrc = self.inputs.netrc_text()
        if netrc is not None:
            server.documents["/secrets/netrc"] = netrc
        if self.inputs.wheelhouse is not None:
            server.mounts["/wheelhouse"] = self.inputs.wheelhouse
        if self.cann_dir is not None:
            server.mounts["/cann"] = self.cann_dir
        if self.artifacts_dir is not None:
            server.mounts["/artifacts"] = self.artifacts_dir
        os_mirror = self.inputs.os_mirror_document()
        if os_mirror is not None:
            server.documents["/secrets/os-mirror"] = os_mirror
        server.documents["/secrets/pip.conf"] = self.inputs.pip_conf(self.url).encode()
        self._thread = threading.Thread(target=server.serve_forever, name="ascend-build-server", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
