"""The committed rendered/ Dockerfiles: in step with the matrix and templates (the drift check), and the check
able to see a change."""

from __future__ import annotations

import shutil
import subprocess
import sys

from ascend_images.stages.drift import drift, update
from tests.fixtures.matrices import ROOT, matrix_copy


def test_committed_dockerfiles_are_what_the_matrix_renders():
    result, directory = drift(ROOT / "matrix.yaml")
    assert result.clean, result.summary(directory) + "\n" + result.diff[:5000]


def test_invoke_render_check_fails_on_drift_and_update_fixes_it(tmp_path):
    """A changed common default is baked in the cann stage: the check names exactly the cann Dockerfiles (CANN 8.5.0
    of both devices' verl over SGLang 0.5.10, 9.0.0 of both devices' SGLang and 9.1.0 of both devices' training base
    and vLLM, all locked for arm64 only), shows the changed line, and exits 1."""
    def longer_timeout(data: dict) -> None:
        data["env"]["common"]["HCCL_CONNECT_TIMEOUT"]["value"] = "7200"

    matrix = matrix_copy(tmp_path, longer_timeout, locks=True)
    shutil.copytree(ROOT / "rendered", tmp_path / "rendered")
    check = [sys.executable, "-m", "invoke", "render", "--check", "--matrix", str(matrix)]
    stale = subprocess.run(check, cwd=ROOT, capture_output=True, text=True)
    assert stale.returncode == 1, stale.stdout + stale.stderr
    assert "6 stale: cann--8.5.0-a2-debian12-py3.11-arm64/Dockerfile, cann--8.5.0-a3-debian12-py3.11-arm64/" \
           "Dockerfile, cann--9.0.0-a2-debian12-py3.11-arm64/Dockerfile, cann--9.0.0-a3-debian12-py3.11-arm64/" \
           "Dockerfile, cann--9.1.0-a2-debian12-py3.11-arm64/Dockerfile, cann--9.1.0-a3-debian12-py3.11-arm64/" \
           "Dockerfile)" in stale.stdout, stale.stdout[-3000:]
    assert '+    HCCL_CONNECT_TIMEOUT="7200"' in stale.stdout or '+ENV HCCL_CONNECT_TIMEOUT="7200"' in stale.stdout
    fixed = subprocess.run([sys.executable, "-m", "invoke", "render", "--update", "--matrix", str(matrix)],
                           cwd=ROOT, capture_output=True, text=True)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert subprocess.run(check, cwd=ROOT, capture_output=True, text=True).returncode == 0


def test_update_removes_what_is_no_longer_rendered(tmp_path):
    matrix = matrix_copy(tmp_path, locks=True)
    gone = tmp_path / "rendered" / "torch-npu--2.7.0-cann8.0.0-a9-debian12-py3.11-arm64" / "Dockerfile"
    gone.parent.mkdir(parents=True)
    gone.write_text("FROM scratch\n")
    result, _ = drift(matrix)
    assert result.extra == ["torch-npu--2.7.0-cann8.0.0-a9-debian12-py3.11-arm64/Dockerfile"]
    committed = len(list((ROOT / "rendered").rglob("Dockerfile")))
    assert len(result.missing) == committed  # nothing else was committed in this copy
    count, directory = update(matrix)
    assert count == committed and not gone.exists() and directory == tmp_path / "rendered"
    assert drift(matrix)[0].clean
