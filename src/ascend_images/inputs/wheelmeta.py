"""A wheel's METADATA read from its URL without downloading the wheel: two HTTP range requests (the zip's
central directory, then the one member), falling back to the whole file where the server ignores ranges.
PyPI mirrors do not always publish PEP 658 metadata files; every server that serves wheels serves bytes."""

from __future__ import annotations

import email.parser
import io
import struct
import urllib.error
import urllib.request
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from ascend_images.errors import AscendImagesError
from ascend_images.inputs.https import urlopen

TAIL = 1 << 16  # the end of central directory record, the comment and most wheels' directories


class WheelMetadataError(AscendImagesError):
    """The wheel could not be read."""


@dataclass(frozen=True)
class WheelMetadata:
    name: str
    version: str
    requires_python: str | None
    requires_dist: list[str] = field(default_factory=list)


def _get(url: str, byte_range: str | None, timeout: float) -> tuple[int, bytes]:
    headers = {"User-Agent": "ascend-images", **({"Range": f"bytes={byte_range}"} if byte_range else {})}
    try:
        with urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        raise WheelMetadataError(f"{url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise WheelMetadataError(f"{url}: {getattr(exc, 'reason', exc)}") from None


def _parse(text: str) -> WheelMetadata:
    message = email.parser.Parser().parsestr(text)
    return WheelMetadata(message["Name"], message["Version"], message["Requires-Python"],
                         message.get_all("Requires-Dist") or [])


def read_metadata(url: str, timeout: float = 60) -> WheelMetadata:
    data = read_member(url, lambda name: name.endswith(".dist-info/METADATA") and name.count("/") == 1, timeout)
    if data is None:
        raise WheelMetadataError(f"{url}: no .dist-info/METADATA in the wheel")
    return _parse(data.decode("utf-8"))


def read_member(url: str, wanted: Callable[[str], bool], timeout: float = 60) -> bytes | None:
    """The first member of the wheel at `url` whose name `wanted` takes, None when it has none: the zip's central
    directory and that member, by range requests (the whole file where the server ignores ranges)."""
    status, tail = _get(url, f"-{TAIL}", timeout)
    if status != 206:  # no range support: this was the whole file
        with zipfile.ZipFile(io.BytesIO(tail)) as wheel:
            name = next((n for n in wheel.namelist() if wanted(n)), None)
            return wheel.read(name) if name is not None else None
    end = tail.rfind(b"PK\x05\x06")
    if end < 0:
        raise WheelMetadataError(f"{url}: no zip directory in its last {TAIL} bytes")
    _, _, _, _, _, dir_size, dir_offset, _ = struct.unpack("<4sHHHHIIH", tail[end:end + 22])
    directory = tail[end - dir_size:end] if dir_size <= end else None
    if directory is None:
        _, directory = _get(url, f"{dir_offset}-{dir_offset + dir_size - 1}", timeout)
    pos = 0
    while pos < len(directory):
        (_, _, _, _, method, _, _, _, size, _, name_len, extra_len, comment_len, _, _, _, local) = struct.unpack(
            "<4sHHHHHHIIIHHHHHII", directory[pos:pos + 46])
        name = directory[pos + 46:pos + 46 + name_len].decode("utf-8")
        pos += 46 + name_len + extra_len + comment_len
        if not wanted(name):
            continue
        # the local header is 30 bytes plus its own name and extra fields; 1 KB covers those
        _, chunk = _get(url, f"{local}-{local + 30 + 1024 + size}", timeout)
        name_len2, extra_len2 = struct.unpack("<HH", chunk[26:30])
        body = chunk[30 + name_len2 + extra_len2:30 + name_len2 + extra_len2 + size]
        return zlib.decompress(body, -15) if method == zipfile.ZIP_DEFLATED else body
    return None
