"""Small conventions of a command-line tool (issue 54, item 6): XDG_CACHE_HOME honoured where our caches are; the
project found by a marker of its own, not any matrix.yaml above the working directory; --ca-bundle read as PEM or
refused naming the file; no terminal codes for TERM=dumb or off a terminal, progress through rich; `--list`
descriptions never cut mid-sentence; errors naming the flag the user typed; set-up's link to the command never
taken from another checkout without a word."""

from __future__ import annotations

import io
import os
import pty
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from ascend_images import console
from tests.fixtures.httpserver import Server
from tests.unit.inprocess import PROGRAMS

from .helpers import ROOT


# --- XDG_CACHE_HOME ------------------------------------------------------------------------------------------------
def test_the_caches_live_under_xdg_cache_home(monkeypatch, tmp_path):
    from ascend_images.inputs.cache import default_cache
    from ascend_images.inputs.download import host_cache
    from ascend_images.inputs.wheelstore import default_store

    for name in ("ASCEND_IMAGES_CACHE", "ASCEND_IMAGES_WHEELS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    mine = tmp_path / "xdg" / "ascend-images"
    assert default_cache() == mine / "downloads"
    assert default_store() == mine / "wheels"
    assert host_cache("test") == mine / "test"  # the test doubles' and kept registries' records
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # the XDG spec: a relative path is ignored
    assert default_cache() == Path.home() / ".cache" / "ascend-images" / "downloads"


# --- the project's own marker --------------------------------------------------------------------------------------
def test_a_foreign_matrix_yaml_above_is_passed_over_and_named(tmp_path, monkeypatch):
    """A matrix.yaml of somebody else's in a parent directory is not the project; the checkout is, and a note says
    which matrix.yaml was passed over and how to use it."""
    foreign = tmp_path / "their-repo"
    (foreign / "sub").mkdir(parents=True)
    (foreign / "matrix.yaml").write_text("releases: {}\n")  # not ours: no pyproject.toml naming ascend-images
    monkeypatch.delenv("ASCEND_IMAGES_PROJECT", raising=False)
    monkeypatch.chdir(foreign / "sub")
    code, out, err = PROGRAMS["ascend-images"](["env", "--device", "a3", "--json"])
    assert code == 0, err
    assert f"note: {foreign / 'matrix.yaml'} is not an ascend-images checkout's" in err
    assert f"--matrix {foreign / 'matrix.yaml'} uses that matrix" in err
    assert '"variant": "cann9.1.0-pt2.10.0/a3/none' in out  # the checkout's matrix, not the foreign one


def test_a_checkout_is_found_by_its_pyproject(tmp_path, monkeypatch):
    from ascend_images.cli.project import find_root

    checkout = tmp_path / "checkout"
    (checkout / "deep").mkdir(parents=True)
    shutil.copy(ROOT / "matrix.yaml", checkout / "matrix.yaml")
    (checkout / "pyproject.toml").write_text('[project]\nname = "ascend-images"\n')
    (checkout / "deep" / "matrix.yaml").write_text("x: 1\n")  # a foreign one nearer: passed over
    monkeypatch.delenv("ASCEND_IMAGES_PROJECT", raising=False)
    assert find_root(cwd=checkout / "deep", installed_from=tmp_path / "none") == checkout


# --- --ca-bundle ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("content", "why"), [
    (b"not a certificate\n", "NO_CERTIFICATE_OR_CRL_FOUND"),
    (b"\x30\x82\x01\x0a" + b"\x00" * 64, ""),  # DER bytes: a certificate, but not PEM
    (b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n", ""),
], ids=["text", "der", "broken-pem"])
@pytest.mark.parametrize("task", ["build", "test"])
def test_a_ca_bundle_that_is_not_pem_is_refused_naming_it(tmp_path, monkeypatch, content, why, task):
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")  # were it taken, the task would stop at the engine
    bundle = tmp_path / "corp-ca.crt"
    bundle.write_bytes(content)
    code, out, err = PROGRAMS["ascend-images"]([task, "--device", "a3", "--ca-bundle", str(bundle)])
    assert code == 2 and out == "", err
    assert err.startswith(f"error: --ca-bundle {bundle}: not PEM CA certificates (") and why in err, err
    assert "-----BEGIN CERTIFICATE-----" in err and err.count("\n") == 1


def test_a_pem_bundle_passes_the_check(monkeypatch):
    from ascend_images.cli.options import InputFlags

    bundle = "/etc/ssl/certs/ca-certificates.crt"
    if not Path(bundle).is_file():
        pytest.skip("no system CA bundle")
    InputFlags(ca_bundle=bundle).check()


# --- progress: rich on a terminal, plain lines elsewhere, no terminal codes for TERM=dumb -----------------------
class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def download(stream, tmp_path) -> str | None:
    from ascend_images.inputs.download import Request, fetch_file

    server = Server()
    server.files["/cann.run"] = b"x" * 300_000
    try:
        fetch_file(Request(server.url("/cann.run"), "cann.run"), tmp_path / "cache", stream=stream)
    finally:
        server.stop()
    return stream.getvalue() if stream is not None else None


@pytest.fixture
def normal_voice():
    console.configure()
    yield
    console.configure()


@pytest.mark.parametrize("term", ["dumb", "xterm-256color"])
def test_a_download_draws_a_rich_bar_only_where_the_terminal_takes_one(normal_voice, monkeypatch, tmp_path, term):
    monkeypatch.setenv("TERM", term)
    text = download(Terminal(), tmp_path)
    if term == "dumb":
        assert "\x1b" not in text and "\r" not in text, repr(text)
        assert text.splitlines()[-1].startswith("cann.run: 100% 300.0 KB/300.0 KB")
    else:
        assert "\x1b[?25l" in text and "\x1b[?25h" in text, repr(text)  # rich hides, then shows the cursor
        assert not console._drawing  # the bar was taken away when the download ended


def test_a_download_off_a_terminal_says_plain_lines(normal_voice, monkeypatch, tmp_path):
    monkeypatch.setenv("TERM", "xterm")
    text = download(io.StringIO(), tmp_path)
    assert "\x1b" not in text and "\r" not in text and "cann.run: 100%" in text


def test_quiet_draws_nothing(tmp_path, capsys):
    console.configure(quiet=True)
    try:
        download(None, tmp_path)  # the default stream: stderr
    finally:
        console.configure()
    assert capsys.readouterr() == ("", "")


def test_a_step_line_is_plain_for_term_dumb(normal_voice, monkeypatch):
    monkeypatch.setenv("TERM", "dumb")
    out = Terminal()
    with console.Steps("lock", total=1, stream=out).step("x"):
        pass
    assert "\x1b" not in out.getvalue() and out.getvalue().startswith("lock 1/1 x (")


# --- --list ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("program", PROGRAMS.values(), ids=PROGRAMS.keys())
def test_the_task_list_never_cuts_a_sentence(program):
    import json

    code, out, _ = program(["--list", "--list-format", "json"])
    assert code == 0
    listed = {t["name"]: t["help"] for t in json.loads(out)["tasks"]}
    assert len(listed) > 15
    for name, help_text in listed.items():
        assert help_text.endswith("."), (name, help_text)  # a whole sentence
    assert listed["build"] == ("Build the selection's images: one `docker buildx bake` of its stages, on any BuildKit "
                               "builder.")


# --- errors name the flag the user typed ---------------------------------------------------------------------------
@pytest.mark.parametrize(("argv", "flag"), [(["build", "--device", "a3", "--cache-dir", ""], "--cache-dir"),
                                            (["fetch", "--device", "a3", "--dest", ""], "--dest")])
def test_an_empty_cache_dir_names_the_flag_typed(argv, flag):
    code, _, err = PROGRAMS["ascend-images"](argv)
    assert code == 2 and err == f"error: {flag} is empty: give a directory path\n"


# --- set-up's link to the command ----------------------------------------------------------------------------------
LINK_SCRIPT = ROOT / "scripts" / "link-command.sh"


@pytest.fixture
def linked(tmp_path) -> tuple[Path, Path, Path]:
    """/usr/local/bin/ascend-images as another checkout left it, in a directory of the test's own."""
    bin_dir, other, mine = tmp_path / "bin", tmp_path / "other" / "ascend-images", tmp_path / "mine" / "ascend-images"
    bin_dir.mkdir()
    (bin_dir / "ascend-images").symlink_to(other)
    return bin_dir / "ascend-images", other, mine


def link(link_path: Path, target: Path, *argv: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(LINK_SCRIPT), str(target), *argv], stdin=subprocess.DEVNULL,
                          env={"PATH": os.environ["PATH"], "ASCEND_IMAGES_LINK": str(link_path), **env},
                          capture_output=True, text=True, timeout=60)


def test_set_up_says_when_it_takes_the_command_from_another_checkout(linked):
    link_path, other, mine = linked
    result = link(link_path, mine)
    assert result.returncode == 0 and os.readlink(link_path) == str(mine)
    assert result.stderr == f"setup: {link_path} ran {other}; it runs {mine} now (--force or " \
                            "ASCEND_IMAGES_FORCE_LINK=1: without a word)\n"


@pytest.mark.parametrize(("argv", "env"), [(["--force"], {}), ([], {"ASCEND_IMAGES_FORCE_LINK": "1"})])
def test_force_takes_it_quietly(linked, argv, env):
    link_path, _, mine = linked
    result = link(link_path, mine, *argv, **env)
    assert (result.returncode, result.stderr) == (0, "") and os.readlink(link_path) == str(mine)


def test_a_first_link_or_the_same_one_is_made_quietly(tmp_path):
    link_path, mine = tmp_path / "ascend-images", tmp_path / "mine" / "ascend-images"
    for _ in range(2):
        result = link(link_path, mine)
        assert (result.returncode, result.stderr) == (0, "") and os.readlink(link_path) == str(mine)


@pytest.mark.parametrize(("answer", "taken"), [("n", False), ("y", True), ("", False)])
def test_on_a_terminal_it_asks(linked, answer, taken):
    link_path, other, mine = linked
    primary, secondary = pty.openpty()
    process = subprocess.Popen(["bash", str(LINK_SCRIPT), str(mine)], stdin=secondary, stdout=secondary,
                               stderr=secondary, env={"PATH": os.environ["PATH"], "ASCEND_IMAGES_LINK": str(link_path)})
    os.close(secondary)
    said = b""
    deadline = time.monotonic() + 30
    while b"[y/N]" not in said and time.monotonic() < deadline:
        if select.select([primary], [], [], 1)[0]:
            said += os.read(primary, 1024)
    os.write(primary, answer.encode() + b"\n")
    assert process.wait(timeout=30) == 0
    os.close(primary)
    assert f"setup: {link_path} runs {other} (another checkout); run {mine} instead? [y/N]".encode() in said
    assert os.readlink(link_path) == str(mine if taken else other)
