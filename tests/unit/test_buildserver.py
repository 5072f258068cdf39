import urllib.error
import urllib.request

import pytest

from ascend_images.builder.buildserver import BuildServer
from ascend_images.errors import SelectionError
from ascend_images.inputs.sources import BuildInputs
from ascend_images.stages.envcapture import clean_path_list, diff_env


def get(url):
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read()


def test_serves_secrets_packages_and_wheel_listing(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nX\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"w")
    cann = tmp_path / "cann"
    cann.mkdir()
    (cann / "a.run").write_bytes(b"run")
    inputs = BuildInputs(ca_bundle=ca, wheelhouse=wheels, pip_index_url="https://mirror.example/simple")
    with BuildServer(inputs, cann, port=0) as server:
        assert get(f"{server.url}/secrets/ca.pem") == ca.read_bytes()
        assert get(f"{server.url}/cann/a.run") == b"run"
        listing = get(f"{server.url}/wheelhouse/").decode()
        assert 'href="torch-2.13.0%2Bcpu-cp311' in listing
        conf = get(f"{server.url}/secrets/pip.conf").decode()
        assert "index-url = https://mirror.example/simple" in conf
        assert f"find-links = {server.url}/wheelhouse/" in conf
        with pytest.raises(urllib.error.HTTPError):
            get(f"{server.url}/cann/../ca.pem")
        with pytest.raises(urllib.error.HTTPError):
            get(f"{server.url}/secrets/netrc")


def test_credentials_get_an_unguessable_prefix(tmp_path):
    netrc = tmp_path / "netrc"
    netrc.write_text("machine pypi.corp login u password p\n")
    with BuildServer(BuildInputs(netrc=netrc), port=0) as server:
        prefix = server.url.rsplit("/", 1)[-1]
        assert len(prefix) >= 16
        assert get(f"{server.url}/secrets/netrc") == netrc.read_bytes()
        root = server.url[: -len(prefix) - 1]
        with pytest.raises(urllib.error.HTTPError):
            get(f"{root}/secrets/netrc")


def test_input_validation(tmp_path):
    with pytest.raises(SelectionError, match="--wheelhouse .* does not exist"):
        BuildInputs(wheelhouse=tmp_path / "nope")
    with pytest.raises(SelectionError, match="--offline needs --wheelhouse"):
        BuildInputs(pip_offline=True)


def test_env_diff_cleans_path_lists():
    before = {"PATH": "/usr/bin", "HOME": "/root", "SHLVL": "1"}
    after = {"PATH": "/a/bin:/usr/bin:/a/bin", "HOME": "/root", "SHLVL": "2", "LD_LIBRARY_PATH": "/a/lib:",
             "ASCEND_HOME_PATH": "/a"}
    assert diff_env(before, after) == {"ASCEND_HOME_PATH": "/a", "LD_LIBRARY_PATH": "/a/lib", "PATH": "/a/bin:/usr/bin"}
    assert clean_path_list("::/x::/y:/x:") == "/x:/y"


def test_a_client_that_goes_away_prints_no_traceback(tmp_path, capfd):
    """A RUN that stops mid-download resets the connection; the server's answer then fails. The build's output
    must not get socketserver's traceback for it (the tests reject any traceback in a build's output)."""
    import socket
    import struct
    import time

    big = tmp_path / "wheels"
    big.mkdir()
    (big / "big.whl").write_bytes(b"x" * (32 << 20))
    with BuildServer(BuildInputs(wheelhouse=big), port=0) as server:
        host, port = server.url.removeprefix("http://").split(":")
        for _ in range(3):
            client = socket.create_connection((host, int(port)))
            client.sendall(b"GET /wheelhouse/big.whl HTTP/1.0\r\n\r\n")
            client.recv(1024)
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
            client.close()
        time.sleep(0.5)
    assert "Traceback" not in capfd.readouterr().err


# --- the built-wheels cache: a wheel compiled by one build is handed to the next ---------------------------------
WHEEL = "arctic_inference-0.1.1-cp311-cp311-linux_aarch64.whl"


def put(url: str, data: bytes, length: str | None = None) -> int:
    request = urllib.request.Request(url, data=data, method="PUT")
    if length is not None:
        request.add_unredirected_header("Content-Length", length)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_built_wheel_is_kept_once_and_listed_for_the_next_build(tmp_path):
    cache = tmp_path / "built"
    house = tmp_path / "house"
    house.mkdir()
    (house / "offline_dep-1.0-py3-none-any.whl").write_bytes(b"h")
    with BuildServer(BuildInputs(wheelhouse=house), port=0, built_wheels=cache) as server:
        base = f"{server.url}/built-wheels/debian12/"
        assert get(base).count(b"<a ") == 1  # nothing built yet: only the wheelhouse's, for offline builds
        assert put(base + WHEEL, b"first") == 201
        assert (cache / "debian12" / WHEEL).read_bytes() == b"first"
        assert put(base + WHEEL, b"second") == 200  # the first one stays
        assert (cache / "debian12" / WHEEL).read_bytes() == b"first"
        listing = get(base).decode()
        assert f'href="{WHEEL}"' in listing and 'href="../../wheelhouse/offline_dep-1.0-py3-none-any.whl"' in listing
        assert get(base + WHEEL) == b"first"
        assert get(f"{server.url}/built-wheels/ubuntu22.04/").count(b"<a ") == 1  # per OS: another glibc
        # nothing but a wheel name, directly in an OS directory, is written
        for bad in ("../evil.whl", "not-a-wheel.txt", ".hidden-1.0-py3-none-any.whl"):
            assert put(base + bad, b"x") == 404, bad
        assert put(f"{server.url}/built-wheels/../x/{WHEEL}", b"x") == 404
        assert put(f"{server.url}/built-wheels/.git/{WHEEL}", b"x") == 404
        assert sorted(str(p.relative_to(cache)) for p in cache.rglob("*")) == ["debian12", f"debian12/{WHEEL}"]


def test_head_answers_what_get_would_without_the_body(tmp_path):
    """uv asks a find-links file's size with HEAD before it fetches it (a native build's build requirements)."""
    import hashlib
    import http.client
    import urllib.parse

    data = b"a wheel's bytes" * 100
    digest = hashlib.sha256(data).hexdigest()
    store = tmp_path / "store"
    (store / digest).mkdir(parents=True)
    (store / digest / "probe-1.0-py3-none-any.whl").write_bytes(data)
    with BuildServer(BuildInputs(), port=0, wheel_store=store) as server:
        url = urllib.parse.urlsplit(server.url)
        answers = {}
        for method, path in [("HEAD", f"/wheels/{digest}/probe-1.0-py3-none-any.whl"), ("HEAD", "/wheels/"),
                             ("HEAD", f"/wheels/{'0' * 64}/probe-1.0-py3-none-any.whl")]:
            connection = http.client.HTTPConnection(url.hostname, url.port, timeout=5)
            connection.request(method, url.path + path)
            response = connection.getresponse()
            answers[path] = (response.status, response.getheader("Content-Length"), response.read())
            connection.close()
        assert get(f"{server.url}/wheels/{digest}/probe-1.0-py3-none-any.whl") == data
    assert answers[f"/wheels/{digest}/probe-1.0-py3-none-any.whl"] == (200, str(len(data)), b"")
    status, length, body = answers["/wheels/"]
    assert status == 200 and int(length) > 0 and body == b""
    assert answers[f"/wheels/{'0' * 64}/probe-1.0-py3-none-any.whl"][0] == 404
