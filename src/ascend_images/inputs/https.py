"""Every HTTP(S) request the tool makes goes through one TLS context per process. urllib otherwise builds a context
for each connection, and loading the system's CA certificates into it costs 22 ms of CPU each time; making one lock
asks the package index for a few hundred pages."""

from __future__ import annotations

import functools
import os
import ssl
import urllib.request
from typing import Any


def urlopen(request: urllib.request.Request | str, timeout: float) -> Any:
    """urllib's urlopen, with the process's TLS context (made again if SSL_CERT_FILE or SSL_CERT_DIR changes)."""
    context = _context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    return urllib.request.urlopen(request, timeout=timeout, context=context)


@functools.lru_cache(maxsize=4)
def _context(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    return ssl.create_default_context()  # reads the two variables itself: they are the cache's key
