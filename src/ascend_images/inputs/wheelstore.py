"""The host's wheel store: every file a lock pins, kept once per host under the sha256 the lock names
(`<store>/<sha256>/<file>`), filled on first use from the index (or a --wheelhouse / find-links directory) and
verified on the way in (download) and on the way out (every install checks the sha256 its lock names). Every
stage of every build on the host installs from it, so two stages, two releases or two namespaces that need a wheel
fetch it once. It is where, never what: no cache key sees it (a stage's named context holds its own files only).
`invoke fetch` fills it for a selection, so an air-gapped host builds from it with --offline."""

from __future__ import annotations

import html
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ascend_images.errors import SelectionError
from ascend_images.inputs.download import host_cache, sha256_file, without_credentials
from ascend_images.inputs.pypi import (
    PYPI_SIMPLE,
    IndexFile,
    PackageIndexError,
    download,
    index_files,
    normalize,
    version_files,
)

Out = Callable[[str], None]


def default_store() -> Path:
    return host_cache("wheels", "ASCEND_IMAGES_WHEELS")


@dataclass(frozen=True)
class StoredFile:
    """A file a lock pins: the package and version it is, and its sha256 (the store's key)."""

    name: str
    version: str
    sha256: str

    def __str__(self) -> str:
        return f"{self.name}=={self.version} (sha256 {self.sha256[:12]})"


class WheelStore:
    def __init__(self, root: Path | None = None, index_urls: Iterable[str] = (PYPI_SIMPLE,),
                 find_links: Iterable[Path] = (), offline: bool = False, out: Out = print,
                 fetch_hint: str = "invoke fetch"):
        self.root = root or default_store()
        self.index_urls = list(index_urls)
        self.find_links = [Path(p) for p in find_links]
        self.offline = offline
        self.out = out
        self.fetch_hint = fetch_hint
        self.downloaded: list[str] = []  # files fetched from an index by this store object, for the bench's count
        self._local: dict[str, Path] | None = None

    def path(self, sha256: str) -> Path | None:
        """The stored file with this sha256, checked: a file that does not hash to its key is deleted, said in one
        line, and treated as missing (it is never served)."""
        directory = self.root / sha256
        files = [p for p in directory.iterdir() if p.is_file() and not p.name.startswith(".")] \
            if directory.is_dir() else []
        for path in files:
            got = sha256_file(path)
            if got == sha256:
                return path
            self.out(f"wheel store: {path} hashes to {got}, not {sha256}: deleted, fetched again")
            path.unlink()
        return None

    def _local_files(self) -> dict[str, Path]:
        """sha256 -> file of the find-links directories (a --wheelhouse): hashed once per store object."""
        if self._local is None:
            self._local = {}
            for directory in self.find_links:
                for path in sorted(directory.iterdir()) if directory.is_dir() else []:
                    if path.is_file() and path.suffix in (".whl", ".gz", ".zip"):
                        self._local[sha256_file(path)] = path
        return self._local

    def _put(self, source: Path, sha256: str, name: str | None = None) -> Path:
        directory = self.root / sha256
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / (name or source.name)
        # a temporary name of this writer's own: two stages (--jobs 2) or two builds may store one file at once
        handle, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".part")
        os.close(handle)
        tmp = Path(tmp_name)
        shutil.copyfile(source, tmp)
        if sha256_file(tmp) != sha256:
            tmp.unlink()
            raise SelectionError(f"{source}: does not hash to {sha256}; not stored")
        tmp.replace(target)
        return target

    def _download(self, item: IndexFile, sha256: str) -> Path:
        (self.root / ".downloads").mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=self.root / ".downloads"))  # this download's own, as in _put
        try:
            path = self._put(download(item, staging), sha256)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self.downloaded.append(item.file)
        return path

    def _from_index(self, wanted: StoredFile, extra: Iterable[str] = ()) -> Path:
        last = ""
        indexes = list(dict.fromkeys([*self.index_urls, *extra]))
        for index in indexes:
            try:
                files = index_files(index, wanted.name)
            except PackageIndexError as exc:
                last = str(exc)
                continue
            item = next((f for f in files if f.sha256 == wanted.sha256), None)
            if item is not None:
                return self._download(item, wanted.sha256)
            # PEP 503 makes the hash optional and a company's Nexus may leave it out: then the files of the pinned
            # version are fetched one by one until one hashes to the pin (the others are deleted, never stored)
            for unhashed in (f for f in version_files(files, wanted.name, wanted.version) if not f.sha256):
                try:
                    return self._download(unhashed, wanted.sha256)
                except SelectionError:
                    continue
            last = f"{without_credentials(index)[0]} has no file of {wanted.name} with that sha256"
        shown = ", ".join(without_credentials(u)[0] for u in indexes)
        raise SelectionError(f"{wanted}: not found on {shown} ({last})")

    def ensure(self, wanted: Iterable[StoredFile], extra_indexes: Iterable[str] = ()) -> list[Path]:
        """Each file in the store, fetched when it is not there yet (from a find-links directory, else the index);
        with `offline`, a missing one stops before anything is built, naming it and the command that fetches it."""
        out = []
        for item in dict.fromkeys(wanted):
            path = self.path(item.sha256)
            if path is None and item.sha256 in self._local_files():
                path = self._put(self._local_files()[item.sha256], item.sha256)
            if path is None and self.offline:
                raise SelectionError(f"--offline: {item} is not in the wheel store ({self.root}); fetch it on a "
                                     f"connected host with `{self.fetch_hint}` (or copy its store here)")
            if path is None:
                path = self._from_index(item, extra_indexes)
            out.append(path)
        return out

    def listing(self) -> bytes:
        """A PEP 503 find-links page of every stored file (with its sha256), for uv and pip in the builds."""
        links = []
        if self.root.is_dir():
            for directory in sorted(p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")):
                for path in sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith(".")):
                    href = f"{directory.name}/{path.name}#sha256={directory.name}"
                    links.append(f'<a href="{html.escape(href)}">{html.escape(path.name)}</a><br>')
        return ("<html><body>\n" + "\n".join(links) + "\n</body></html>\n").encode()


def stored_files(lines: Iterable[str]) -> list[StoredFile]:
    """The files a list of `name==version --hash=sha256:...` lines pins."""
    out = []
    for line in lines:
        spec, _, rest = line.partition(" --hash=sha256:")
        name, _, version = spec.partition("==")
        if rest:
            out.append(StoredFile(normalize(name), version, rest.split()[0]))
    return out


def variant_files(v, with_tools: bool = True) -> list[StoredFile]:
    """Every file of the wheel store a variant's build takes: each pin of its locks (a wheel, or the sdist a package
    without one builds from), its backend's sdist when PyPI carries it, and uv for every host arch."""
    from ascend_images.inputs.lockspec import load_lock, variant_layers

    out: list[StoredFile] = []
    for layer in variant_layers(v):
        lock = load_lock(v, layer)
        out += [StoredFile(name, lock.pins[name], sha256) for name, sha256 in sorted(lock.hashes.items())]
        if layer == "backend" and not lock.source_subdir:
            file, _, sha256 = lock.source_sdist
            if sha256:
                name, _, rest = file.partition("-")
                out.append(StoredFile(normalize(name), rest.removesuffix(".tar.gz"), sha256))
    if with_tools:
        uv = v.matrix.spec.tools["uv"]
        out += [StoredFile("uv", uv.version, f.sha256) for f in uv.files.values()]
    return out
