"""How `invoke rebuild` says what differs between two builds of a layer: entry by entry, in seconds."""

import io
import tarfile

from ascend_images.release.reproduce import entry_differences


def layer(path, entries):
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as archive:
        for name, data, mtime in entries:
            info = tarfile.TarInfo(name)
            info.mtime = mtime
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                archive.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                archive.addfile(info, io.BytesIO(data))
    return path


def test_each_differing_entry_is_named_with_what_differs(tmp_path):
    same = [("usr/", None, 1795824000), ("usr/lib/a.py", b"print(1)\n", 1795824000)]
    a = layer(tmp_path / "a.tar", [*same, ("usr/x/", None, 946684800),
                                    ("usr/x/uv_cache.json", b'{"timestamp":1795873226}', 1795824000)])
    b = layer(tmp_path / "b.tar", [*same, ("usr/x/", None, 1795824000),
                                    ("usr/x/uv_cache.json", b'{"timestamp":1795881000}', 1795824000),
                                    ("usr/x/new", b"", 1795824000)])
    text = entry_differences(a, b)
    assert text.splitlines() == [
        "3 of 4 entries differ (1 time, 1 only in the second, 1 content):",
        "  usr/x: time 946684800 against 1795824000",
        "  usr/x/new: only in the second",
        "  usr/x/uv_cache.json: content",
    ]
    assert entry_differences(a, a) == "the same entries (the tars differ in order or padding)"
    assert entry_differences(a, b, limit=1).endswith("  usr/x: time 946684800 against 1795824000\n  ... and 2 more")
