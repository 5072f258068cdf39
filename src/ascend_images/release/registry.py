"""A small client for the registry HTTP API (OCI distribution spec): read manifests, write manifest lists.

Retries what may pass (connection refused or reset, timeouts, 5xx, 429) with backoff; a definitive
answer (400, 401, 403, 404...) is raised at once. Credentials come from the docker config (including
credential helpers, through the docker SDK) or ASCEND_IMAGES_REGISTRY_USER/_PASSWORD, and are never printed.
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ascend_images.errors import AscendImagesError, Unreachable
from ascend_images.inputs.https import urlopen

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
ACCEPT = ", ".join((DOCKER_MANIFEST, DOCKER_LIST, OCI_MANIFEST, OCI_INDEX))
BACKOFF = (0.5, 1.0, 2.0, 4.0, 8.0)


class RegistryError(AscendImagesError):
    def __init__(self, message: str, status: int | None = None, transient: bool = False):
        super().__init__(message)
        self.status = status
        self.transient = transient


class RegistryUnreachable(RegistryError, Unreachable):
    """The registry did not answer or kept failing through every retry, or refused the credentials."""


@dataclass(frozen=True)
class Manifest:
    digest: str
    media_type: str
    size: int
    body: dict[str, Any]


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, RegistryError):
        return exc.transient
    if isinstance(exc, urllib.error.HTTPError):
        return exc.code >= 500 or exc.code == 429
    return isinstance(exc, urllib.error.URLError | ConnectionError | TimeoutError | OSError)


def retry(what: str, action: Callable[[], Any], sleep: Callable[[float], None] = time.sleep,
          backoff: tuple[float, ...] = BACKOFF) -> Any:
    """Run `action`, retrying transient failures; the final error says what was tried and how often."""
    for attempt, delay in enumerate((*backoff, None), 1):
        try:
            return action()
        except Exception as exc:
            if not is_transient(exc) or delay is None:
                if is_transient(exc):
                    raise RegistryUnreachable(f"{what}: still failing after {attempt} attempts: {exc}",
                                              transient=True) from None
                raise
            sleep(delay)
    raise AssertionError("unreachable")


def credentials(host: str) -> tuple[str, str] | None:
    user, password = os.environ.get("ASCEND_IMAGES_REGISTRY_USER"), os.environ.get("ASCEND_IMAGES_REGISTRY_PASSWORD")
    if user and password:
        return user, password
    try:
        import docker.auth

        found = docker.auth.resolve_authconfig(docker.auth.load_config(), host)
    except Exception:
        return None
    if found and found.get("Username") and found.get("Password"):
        return found["Username"], found["Password"]
    return None


class RegistryClient:
    def __init__(self, host: str, *, insecure: bool | None = None, timeout: float = 30,
                 sleep: Callable[[float], None] = time.sleep):
        self.host = host
        local = re.match(r"^(localhost|127\.\d+\.\d+\.\d+|\[::1\])(:\d+)?$", host) is not None
        self.scheme = "http" if (insecure if insecure is not None else local) else "https"
        self.timeout = timeout
        self.sleep = sleep
        self.auth = credentials(host)
        self._tokens: dict[str, str] = {}

    # --- transport -----------------------------------------------------------------------------------
    def _request(self, method: str, repo: str, path: str, data: bytes | None = None,
                 headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        url = f"{self.scheme}://{self.host}/v2/{repo}/{path}"
        headers = dict(headers or {})
        if repo in self._tokens:
            headers["Authorization"] = self._tokens[repo]
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urlopen(request, timeout=self.timeout) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 401 and repo not in self._tokens and self._authorize(repo, exc.headers):
                return self._request(method, repo, path, data, headers)
            body = exc.read().decode("utf-8", "replace")[:300]
            if exc.code == 401:
                said = ("refused the credentials given" if self.auth else
                        "asks for credentials and none are configured")
                raise RegistryUnreachable(f"{self.host} {said} ({method} {url}): log in with `docker login "
                                          f"{self.host}` or set ASCEND_IMAGES_REGISTRY_USER and "
                                          "ASCEND_IMAGES_REGISTRY_PASSWORD", 401) from None
            raise RegistryError(f"{method} {url}: HTTP {exc.code} {body.strip()}", exc.code,
                                transient=exc.code >= 500 or exc.code == 429) from None

    def _authorize(self, repo: str, headers: Any) -> bool:
        challenge = headers.get("WWW-Authenticate", "")
        if self.auth is None:
            return False
        user, password = self.auth
        basic = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        if challenge.lower().startswith("basic"):
            self._tokens[repo] = basic
            return True
        if challenge.lower().startswith("bearer"):
            params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
            query = urllib.parse.urlencode({k: v for k, v in params.items() if k in ("service", "scope")}
                                           | {"scope": f"repository:{repo}:pull,push"})
            request = urllib.request.Request(f"{params['realm']}?{query}", headers={"Authorization": basic})
            with urlopen(request, timeout=self.timeout) as response:
                token = json.loads(response.read())
            self._tokens[repo] = f"Bearer {token.get('token') or token.get('access_token')}"
            return True
        return False

    # --- manifests -----------------------------------------------------------------------------------
    def manifest(self, repo: str, reference: str) -> Manifest | None:
        """The manifest a tag or digest names, or None when the registry has no such tag."""
        def get() -> Manifest | None:
            try:
                _, headers, body = self._request("GET", repo, f"manifests/{reference}", headers={"Accept": ACCEPT})
            except RegistryError as exc:
                if exc.status == 404:
                    return None
                raise
            digest = headers.get("Docker-Content-Digest") or _digest(body)
            media = headers.get("Content-Type", "").split(";")[0] or json.loads(body).get("mediaType", "")
            return Manifest(digest, media, len(body), json.loads(body))

        return retry(f"read {self.host}/{repo}:{reference}", get, self.sleep)

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
        headers = self.put_manifest_headers(repo, reference, body, media_type)
        return headers.get("Docker-Content-Digest") or _digest(body)


    # --- blobs and referrers (OCI artifacts: SBOM, provenance) ----------------------------------------
    def put_blob(self, repo: str, data: bytes) -> str:
        """Upload one blob (monolithic: POST, then PUT with its digest) unless the registry has it; its digest."""
        digest = _digest(data)

        def has() -> bool:
            try:
                self._request("HEAD", repo, f"blobs/{digest}")
            except RegistryError as exc:
                if exc.status == 404:
                    return False
                raise
            return True

        def upload() -> None:
            _, headers, _ = self._request("POST", repo, "blobs/uploads/", data=b"")
            location = urllib.parse.urljoin(f"{self.scheme}://{self.host}/v2/{repo}/blobs/uploads/",
                                            headers.get("Location", ""))
            parts = urllib.parse.urlsplit(location)
            query = parts.query + ("&" if parts.query else "") + urllib.parse.urlencode({"digest": digest})
            path = parts.path.removeprefix(f"/v2/{repo}/") + "?" + query
            self._request("PUT", repo, path, data=data, headers={"Content-Type": "application/octet-stream"})

        if not retry(f"look up blob {digest[:19]} in {self.host}/{repo}", has, self.sleep):
            retry(f"upload blob {digest[:19]} to {self.host}/{repo}", upload, self.sleep)
        return digest

    def blob(self, repo: str, digest: str) -> bytes:
        def get() -> bytes:
            _, _, body = self._request("GET", repo, f"blobs/{digest}")
            return body

        data = retry(f"read blob {digest[:19]} from {self.host}/{repo}", get, self.sleep)
        if _digest(data) != digest:
            raise RegistryError(f"{self.host}/{repo}: blob {digest} arrived with digest {_digest(data)}")
        return data

    def referrers_api(self, repo: str, digest: str) -> list[dict[str, Any]] | None:
        """The referrers of a manifest by the registry's referrers API, or None where the registry has none (404:
        Debian 12's docker-registry, distribution 2.8)."""
        def get() -> list[dict[str, Any]] | None:
            try:
                _, _, body = self._request("GET", repo, f"referrers/{digest}", headers={"Accept": OCI_INDEX})
            except RegistryError as exc:
                if exc.status in (404, 405):
                    return None
                raise
            return json.loads(body).get("manifests", [])

        return retry(f"list referrers of {self.host}/{repo}@{digest[:19]}", get, self.sleep)

    def put_manifest_headers(self, repo: str, reference: str, body: bytes, media_type: str) -> dict[str, str]:
        """PUT a manifest; the registry's answer headers (`OCI-Subject`: it indexed the subject itself)."""
        def put() -> dict[str, str]:
            _, headers, _ = self._request("PUT", repo, f"manifests/{reference}", data=body,
                                          headers={"Content-Type": media_type})
            return headers

        return retry(f"write {self.host}/{repo}:{reference}", put, self.sleep)


def _digest(body: bytes) -> str:
    import hashlib

    return f"sha256:{hashlib.sha256(body).hexdigest()}"


def image_index(children: list[tuple[Manifest, dict[str, str], dict[str, str]]]) -> bytes:
    """An OCI image index naming each child by the digest the registry holds (never re-serialised), with its
    platform and its annotations (the base image's name and digest where it is published: DESIGN 27). An OCI index,
    not a Docker manifest list: only it carries annotations, and the children are OCI manifests."""
    doc = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [
            {"mediaType": m.media_type, "size": m.size, "digest": m.digest, "platform": platform,
             **({"annotations": dict(sorted(annotations.items()))} if annotations else {})}
            for m, platform, annotations in children
        ],
    }
    return json.dumps(doc, indent=3).encode()
