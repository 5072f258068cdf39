"""The two programs run in this process as a shell would start them, for tests that try many command lines: invoke's
own Program finding tasks.py (`invoke --search-root ROOT`, the class tasks.py patches) and `ascend-images`'s main.
And a port that counts who knocks, to prove a command reached for no engine or index."""

from __future__ import annotations

import contextlib
import io
import socket
import threading
from collections.abc import Callable

from tests.conftest import ROOT

Result = tuple[int, str, str]  # exit code, stdout, stderr


def run_invoke(argv: list[str]) -> Result:
    from invoke import Program

    return _run(lambda: Program(version="test").run(["invoke", "--search-root", str(ROOT), *argv]))


def run_ascend_images(argv: list[str]) -> Result:
    from ascend_images.cli.entry import main

    return _run(lambda: main(["ascend-images", *argv]))


PROGRAMS = {"invoke": run_invoke, "ascend-images": run_ascend_images}


def _run(call: Callable[[], None]) -> Result:
    from ascend_images.cli import project

    project.set_root(None)  # a process finds its project once; each run here is a process of its own
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            call()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return code, out.getvalue(), err.getvalue()


class Listener:
    """A TCP port that counts who came. It hangs up at once; `silent`, it keeps each connection open and never says
    a word (a server that hangs), and `knocked` is set at the first connection."""

    def __init__(self, silent: bool = False) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.silent = silent
        self.connections = 0
        self.knocked = threading.Event()
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            self.knocked.set()
            if self.silent:
                self.held.append(conn)
            else:
                conn.close()

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()
