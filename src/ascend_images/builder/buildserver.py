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
  /built-wheels/<key>/ wheels compiled from sdists and source trees by earlier builds (a find-links listing), and
                      PUT of one a build compiled: one cache on the host under a key of the inputs' sha256 and the
                      target (arch, Python, OS, torch), so a wheel is compiled once per host, whichever build needs it
  /wheels/            the host's wheel store (inputs/wheelstore.py): a find-links listing of every locked file with its
                      sha256; /wheels/<sha256>[/<file>] one file, hashed again as it is served (a file that does not
                      hash to its key is refused: 409)
"""

from __future__ import annotations

import html
import http.server
import re
import secrets
import sys
import threading
import urllib.parse
from pathlib import Path
from types import TracebackType

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from ascend_images.inputs.sources import BuildInputs
from ascend_images.inputs.wheelstore import WheelStore

# A stable port keeps the ARG value stable, so Docker's layer cache survives between builds.
PREFERRED_PORT = 39517


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        self.server.requests.append(self.path)

    def do_HEAD(self) -> None:
        """What GET would answer, without the body: uv asks a find-links file's size first when it resolves (a
        native build's build requirements)."""
        self.do_GET()

    def do_GET(self) -> None:
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        prefix = self.server.prefix
        if not path.startswith(prefix + "/"):
            self.send_error(404)
            return
        rel = path[len(prefix):]
        if self._built_wheels(rel) or self._wheel_store(rel):
            return
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

    def do_PUT(self) -> None:
        """A wheel a build compiled, into the built-wheels cache: a valid wheel name, a size given, first one kept."""
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        prefix, cache = self.server.prefix, self.server.built_wheels
        rel = path[len(prefix):] if path.startswith(prefix + "/") else ""
        parts = rel.split("/")
        if cache is None or len(parts) != 4 or parts[1] != "built-wheels" or not _plain(parts[2]) or \
                not _wheel_name(parts[3]):
            self.send_error(404)
            return
        try:
            size = int(self.headers.get("Content-Length", ""))
        except ValueError:
            size = -1
        if not 0 < size <= MAX_WHEEL:
            self.send_error(411 if size < 0 else 413)
            return
        target = cache / parts[2] / parts[3]
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{parts[3]}.{secrets.token_hex(4)}.part")
        with tmp.open("wb") as handle:
            left = size
            while left > 0 and (chunk := self.rfile.read(min(left, 1 << 20))):
                handle.write(chunk)
                left -= len(chunk)
        if left > 0 or target.exists():  # cut short, or another build kept its own first
            tmp.unlink()
            self.send_response(400 if left > 0 else 200)
        else:
            tmp.replace(target)
            self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _built_wheels(self, rel: str) -> bool:
        """GET /built-wheels/<os>/ (a listing: the cache's wheels and the wheelhouse's) or one cached wheel."""
        cache, parts = self.server.built_wheels, rel.split("/")
        if cache is None or len(parts) != 4 or parts[1] != "built-wheels" or not _plain(parts[2]):
            return False
        directory = cache / parts[2]
        if parts[3] == "":
            files = [p for p in sorted(directory.glob("*.whl")) if p.is_file()] if directory.is_dir() else []
            links = [(p.name, p.name) for p in files]
            wheelhouse = self.server.mounts.get("/wheelhouse")
            if wheelhouse is not None:
                links += [(f"../../wheelhouse/{p.name}", p.name) for p in sorted(wheelhouse.iterdir()) if p.is_file()]
            body = "".join(f'<a href="{html.escape(urllib.parse.quote(href))}">{html.escape(name)}</a><br>\n'
                           for href, name in links)
            self._send_bytes(f"<html><body>\n{body}</body></html>\n".encode(), "text/html")
        elif _wheel_name(parts[3]) and (directory / parts[3]).is_file():
            self._send_file(directory / parts[3])
        else:
            self.send_error(404)
        return True

    def _wheel_store(self, rel: str) -> bool:
        """GET /wheels/ (the store's listing) or /wheels/<sha256>[/<file>] (one file, verified as it goes out)."""
        store = self.server.wheel_store
        parts = rel.split("/")
        if store is None or len(parts) < 3 or parts[1] != "wheels":
            return False
        if rel == "/wheels/":
            self._send_bytes(WheelStore(store.root).listing(), "text/html")
            return True
        sha256 = parts[2]
        if not re.fullmatch(r"[0-9a-f]{64}", sha256) or len(parts) > 4:
            self.send_error(404)
            return True
        found = store.path(sha256)
        if found is None or (len(parts) == 4 and parts[3] != found.name):
            self.send_error(404 if found is None else 409)
            return True
        self._send_file(found)
        return True

    def _send_bytes(self, data: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _send_file(self, path: Path) -> None:
        size = path.stat().st_size
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        if self.command == "HEAD":
            return
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


MAX_WHEEL = 2 << 30  # a compiled wheel larger than 2 GiB is no wheel of ours


def _plain(name: str) -> bool:
    """A single path segment: no separator, no dot-dot, nothing hidden."""
    return bool(name) and "/" not in name and not name.startswith(".")


def _wheel_name(name: str) -> bool:
    if not _plain(name):
        return False
    try:
        parse_wheel_filename(name)
    except InvalidWheelFilename:
        return False
    return True


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
        self.built_wheels: Path | None = None
        self.wheel_store: WheelStore | None = None
        self.requests: list[str] = []


class BuildServer:
    """Context manager: `with BuildServer(inputs, cann_dir) as server: server.url`."""

    def __init__(self, inputs: BuildInputs, cann_dir: Path | None = None, artifacts_dir: Path | None = None,
                 port: int = PREFERRED_PORT, built_wheels: Path | None = None, wheel_store: Path | None = None):
        self.inputs = inputs
        self.cann_dir = cann_dir
        self.artifacts_dir = artifacts_dir
        self.built_wheels = built_wheels
        self.wheel_store = wheel_store
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
        server.built_wheels = self.built_wheels
        if self.wheel_store is not None:  # what the store says of a file that fails its hash goes nowhere: refused
            server.wheel_store = WheelStore(self.wheel_store, out=lambda line: None)
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
