"""The committed rendered/ build contexts and bake file: in step with the matrix and templates (the drift check), and
the check able to see a change."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import yaml

from ascend_images.stages.drift import drift, update
from tests.fixtures.matrices import ROOT, matrix_copy

FACTS = yaml.safe_load((ROOT / "tests" / "fixtures" / "release_facts.yaml").read_text(encoding="utf-8"))


def test_committed_dockerfiles_are_what_the_matrix_renders():
    result, directory = drift(ROOT / "matrix.yaml")
    assert result.clean, result.summary(directory) + "\n" + result.diff[:5000]


def test_invoke_render_check_fails_on_drift_and_update_fixes_it(tmp_path):
    """A changed common default torch_npu reads is baked in the torch stage, the first that ships its reader: the
    check names exactly the torch-npu Dockerfiles (every committed torch stage, of every device and release)
    among the Dockerfiles, and env.json, which documents every variable, of the stages from
    torch up; it shows the changed line, and exits 1."""
    def longer_timeout(data: dict) -> None:
        data["env"]["common"]["HCCL_CONNECT_TIMEOUT"]["value"] = "7200"

    matrix = matrix_copy(tmp_path, longer_timeout, locks=True)
    shutil.copytree(ROOT / "rendered", tmp_path / "rendered")
    check = [sys.executable, "-m", "invoke", "render", "--check", "--matrix", str(matrix)]
    stale = subprocess.run(check, cwd=ROOT, capture_output=True, text=True)
    assert stale.returncode == 1, stale.stdout + stale.stderr
    assert '+    HCCL_CONNECT_TIMEOUT="7200"' in stale.stdout or '+ENV HCCL_CONNECT_TIMEOUT="7200"' in stale.stdout
    result, _ = drift(matrix)
    # every torch stage committed (the overlay over one, whose tag ends in its overlay, sets no common variable), and
    # no stage of another kind: which releases and devices have one is the defaults', not this test's
    torch_stages = sorted(f"{p.name}/Dockerfile" for p in (ROOT / "rendered").glob("torch-npu--*-arm64"))
    assert len(torch_stages) >= 2
    assert [name for name in result.stale if name.endswith("/Dockerfile")] == torch_stages
    assert {name.split("/", 1)[1] for name in result.stale if not name.endswith("/Dockerfile")} == {"etc/env.json"}
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
    committed = len([p for p in (ROOT / "rendered").rglob("*") if p.is_file()])
    assert len(result.missing) == committed  # nothing else was committed in this copy
    count, directory = update(matrix)
    assert count == committed and not gone.exists() and directory == tmp_path / "rendered"
    assert drift(matrix)[0].clean


def test_the_bake_file_chains_the_stages_and_takes_its_inputs_as_variables():
    """rendered/docker-bake.json, read as bake reads it: each stage over its parent's target (a named context that
    replaces the parent's name in FROM), where the contexts are, the inputs, the namespace and SOURCE_DATE_EPOCH as
    variables, one platform, one tag."""
    import json

    bake = json.loads((ROOT / "rendered" / "docker-bake.json").read_text())
    targets = bake["target"]
    # the SGLang image of A3 the CI selection holds (its default), found by its kind: a target is named for its tag
    (name,) = [n for n in bake["group"]["ci-test"]["targets"] if n.startswith("sglang--") and "-a3-" in n]
    tail = name.removeprefix("sglang--")  # 0_5_17-cann9_0_0-a3-debian12-py3_11-arm64
    version, cann = re.fullmatch(r"(\S+?)-cann(\S+?)-a3-debian12-py3_11-arm64", tail).groups()
    version, cann = version.replace("_", "."), cann.replace("_", ".")
    dotted = f"{version}-cann{cann}-a3-debian12-py3.11-arm64"
    torch_npu = FACTS["sglang"][version]["torch_npu"]  # upstream's pairing (tests/fixtures/release_facts.yaml)
    torch_tail = f"{torch_npu}-cann{cann}-a3-debian12-py3.11-arm64"
    sglang = targets[name]
    # written out by hand: the SGLang image over its torch image, from the committed context
    assert sglang["context"] == f"${{CONTEXTS}}/sglang--{dotted}"
    assert sglang["contexts"] == {
        f"ascend-images/torch-npu:{torch_tail}": "target:torch-npu--" + torch_tail.replace(".", "_"),
        "artifacts": f"${{BAKE_INPUTS}}/{name}/artifacts",
        "wheels": f"${{BAKE_INPUTS}}/{name}/wheels"}
    assert sglang["platforms"] == ["linux/arm64"]
    assert sglang["tags"] == [f"${{NAMESPACE}}/sglang:{dotted}"]
    assert sglang["args"] == {"SOURCE_DATE_EPOCH": "${SOURCE_DATE_EPOCH}", "INSTALLER_BASE": "${INSTALLER_BASE}"}
    # the chain down to the OS: each target's parent is a target of the file, and every context directory is committed
    chain = []
    while name:
        chain.append(name.split("--")[0])
        assert (ROOT / targets[name]["context"].replace("${CONTEXTS}", "rendered") / "Dockerfile").is_file()
        parents = [v for v in targets[name]["contexts"].values() if v.startswith("target:")]
        name = parents[0].removeprefix("target:") if parents else ""
    assert chain == ["sglang", "torch-npu", "cann", "cann-install", "base"]
    assert bake["variable"]["SOURCE_DATE_EPOCH"] == {"default": "1795824000"}  # matrix.yaml's 2026-11-28, UTC
    assert bake["variable"]["BAKE_INPUTS"] == {"default": "build/bake-inputs"}  # where `invoke fetch` lays them out
    assert bake["variable"]["CONTEXTS"] == {"default": "rendered"}
    assert bake["variable"]["NAMESPACE"] == {"default": "ascend-images"}
    cann_tail = f"{cann}-a3-debian12-py3.11-arm64"
    assert targets["cann--" + cann_tail.replace(".", "_")]["contexts"] == {
        f"ascend-images/cann-install:{cann_tail}": "target:cann-install--" + cann_tail.replace(".", "_")}  # no input


def context_copies_into_the_image(dockerfile: str) -> list[str]:
    """The COPY and ADD lines of the image's own stage (after the last FROM) that take from the build context, not
    from a stage of the build: BuildKit gives the directory such a file lands in the clock's time, so the layer's
    digest changes with every build (tests/integration/test_reproducible.py shows it on a real engine)."""
    own = dockerfile.rsplit("\nFROM ", 1)[-1]
    return [line for line in own.splitlines() if line.startswith(("COPY ", "ADD ")) and "--from=" not in line]


def test_no_committed_dockerfile_copies_from_the_context_into_the_image():
    dockerfiles = sorted((ROOT / "rendered").glob("*/Dockerfile"))
    assert len(dockerfiles) > 20
    found = {path.parent.name: context_copies_into_the_image(path.read_text()) for path in dockerfiles}
    assert {name: lines for name, lines in found.items() if lines} == {}
    # each of them stages its files first (images/common/partials/image-files.j2), time and mode set in one step
    for path in dockerfiles:
        text = path.read_text()
        if "--from=image-files" in text:
            assert " AS image-files\n" in text and 'touch -h -d "@${SOURCE_DATE_EPOCH}"' in text, path


def test_the_check_sees_a_copy_straight_into_the_image():
    text = (ROOT / "rendered/cann--9.0.0-a3-debian12-py3.11-arm64/Dockerfile").read_text()
    assert context_copies_into_the_image(text) == []
    broken = text.replace("COPY --from=image-files /out/config/ /", "COPY etc/ /etc/ascend-images/")
    assert context_copies_into_the_image(broken) == ["COPY etc/ /etc/ascend-images/"]
    # a stage before the last may copy from the context: only the image's own stage makes its layers
    assert context_copies_into_the_image("FROM a AS s\nCOPY x /y\nFROM b\nCOPY --from=s /y /y\n") == []
