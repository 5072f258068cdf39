"""Every flag is checked at the edge: a bad value gets one `error:` line naming the flag and what is wrong, leaves
nothing rendered, and a credential in an index URL reaches no rendered file. The inputs below are the ones a user
tried (issue 26), each run through the real `invoke` command line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ascend_images.builder.stageinputs import secret_documents
from ascend_images.cli.options import InputFlags
from ascend_images.inputs.sources import BuildInputs, split_url
from tests.conftest import ROOT

MARKER = "s3cret-marker-26"


def invoke(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode != 0, result.stdout[-2000:]
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize(("args", "says"), [
    (["render", "--env", "X=a\nRUN touch /pwned"], "--env X: the value holds the control character \\n"),
    (["render", "--env", "X=a\rRUN touch /pwned"], "--env X: the value holds the control character \\r"),
    (["render", "--namespace", "Bad/UPPER"], "--namespace 'Bad/UPPER': 'Bad' is not a repository path component"),
    (["render", "--namespace", "my images"], "--namespace 'my images': 'my images' is not a repository path"),
    (["render", "--matrix", "tests"], "--matrix tests: a directory, not a file"),
    (["render", "--cann-dir", "README.md"], "--cann-dir README.md: a file, not a directory"),
    (["render", "--torch-index-url", "https://mirror.example/simple?token=abc"],
     "--torch-index-url https://mirror.example/simple: a query or fragment cannot be kept out of the image"),
    (["render", "--torch-index-url", "ftp://mirror.example/simple"], "expected an http(s)://HOST/... index URL"),
    (["build", "--checksums", "/nonexistent/sums"], "--checksums /nonexistent/sums: no such file"),
    (["fetch", "--dest", "/proc/forbidden"], "--dest /proc/forbidden: nothing can be made under /proc"),
    (["fetch", "--bake-inputs", ""], "--bake-inputs is empty: give a directory path"),
    (["fetch", "--bake-inputs", "/proc/forbidden"], "--bake-inputs /proc/forbidden: nothing can be made under /proc"),
    (["bench", "--runs", "abc"], "--runs abc: expected a whole number from 1 to 10000"),
    (["build", "--builder", ""], "--builder is empty: name a builder `docker buildx ls` lists"),
    (["build", "--push", "--load"], "--push and --load contradict each other"),
    (["build", "--push", "--namespace", "team"], "--push sends every stage to its tag's registry, and --namespace "
                                                 "team names none"),
    (["build", "--ci", "nightly"], "--ci 'nightly': valid: publish, test"),
    (["build", "--ci", "test"], "--device a3 has no effect here: --ci test builds matrix.yaml's ci.test as it is"),
    (["build", "--demo", "--cann-dir", "/tmp"], "--cann-dir /tmp has no effect here: --demo builds from the test "
                                                 "doubles it makes in build/demo-inputs"),
    (["build", "--demo", "--fetch"], "--fetch has no effect here: --demo builds from the test doubles"),
    (["test", "--ci"], "--device a3 has no effect here: --ci builds matrix.yaml's ci.test from the test doubles"),
    (["test", "--full"], "--full has no effect here: --full chooses the tier of --ci's test run; give --ci with it"),
    (["bench", "--runs", "0"], "--runs 0: expected a whole number from 1 to 10000"),
    (["run", "--print", "--format", "k8s", "--image", "x", "--replicas", "-5"],
     "--replicas -5: expected a whole number from 0 to 10000"),
    (["build", "--os-mirror", "http://deb.example/debian?token=abc"],
     "--os-mirror http://deb.example/debian: a query or fragment cannot be kept out of the image"),
    (["build", "--os-mirror", "deb.example/debian"], "expected an http(s)://HOST/... OS package mirror URL"),
    (["build", "--os-mirror", "http://user:two%20words@deb.example/debian"],
     "--os-mirror http://deb.example/debian: the user name or password holds white space"),
    (["build", "--torch-index-url", "https://user:a%0Ab@mirror.example/simple"],
     "--torch-index-url https://mirror.example/simple: the user name or password holds white space or a control"),
])
def test_a_bad_flag_is_one_line_and_renders_nothing(tmp_path, args, says):
    out = tmp_path / "contexts"
    extra = ["--out", str(out)] if args[0] == "render" else []
    line = one_error_line(invoke(*args, "--device", "a3", *extra))
    assert says in line, line
    assert not out.exists()


def test_a_credential_in_the_torch_index_reaches_no_rendered_file(tmp_path):
    out = tmp_path / "contexts"
    result = invoke("render", "--device", "a3", "--arch", "x86_64", "--out", str(out),
                    "--torch-index-url", f"https://user:{MARKER}@mirror.example/simple")
    assert result.returncode == 0, result.stderr
    files = [p for p in out.rglob("*") if p.is_file()]
    assert files and not [p for p in files if MARKER.encode() in p.read_bytes()]
    assert MARKER not in result.stdout + result.stderr
    # the index is the host's to fetch the locked torch wheel from (into the wheel store), never the build's
    assert not [p for p in files if b"mirror.example" in p.read_bytes()]


def test_index_credentials_go_to_the_builds_netrc_secret():
    public, credential = split_url("--torch-index-url", f"https://user:{MARKER}@mirror.example:8443/simple")
    assert public == "https://mirror.example:8443/simple"
    inputs = BuildInputs(index_credentials=(credential,))
    assert inputs.netrc_text() == f"machine mirror.example login user password {MARKER}\n".encode()
    assert secret_documents(inputs)["netrc"] == inputs.netrc_text()  # a build secret, never a build arg


def test_an_os_mirrors_credentials_are_a_secret_never_rendered():
    inputs = InputFlags(os_mirror=f"https://mirror%40corp:{MARKER}@deb.example:8443/debian/").inputs()
    assert inputs.os_mirror == "https://deb.example:8443/debian/"  # what may be seen
    assert inputs.os_mirror_credential == ("deb.example", "mirror@corp", MARKER)
    # written out by hand: the URL, the user, the password, a line each (what os-install reads from the secret)
    assert secret_documents(inputs)["os-mirror"] == f"https://deb.example:8443/debian/\nmirror@corp\n{MARKER}\n".encode()
    plain = InputFlags(os_mirror="http://deb.example/debian").inputs()
    assert plain.os_mirror_document() == b"http://deb.example/debian\n\n\n"
    assert InputFlags().inputs().os_mirror_document() is None
