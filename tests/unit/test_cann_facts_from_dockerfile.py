"""The script that makes a new CANN's facts (tests/fixtures/cann_facts/from_dockerfile.py) read from the official
950 image's Dockerfile, as tests/fixtures/a5_facts/upstream.md records it (CCI cann/9.1.0-950-ubuntu22.04-py3.12 at
dc9e733c), gives the CANN 9.1.0 facts cann.yaml holds, which were written out from the A3 image's Dockerfile: the
950's CANN env is A3's, and its own part is the operator package. So the 950 image, which tests/image compares with
cann.yaml's 9.1.0, is compared with the official 950 image's ENV block too."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.conftest import ROOT
from tests.fixtures.cann_facts.from_dockerfile import DockerfileError, main, read

A5_FACTS = ROOT / "tests/fixtures/a5_facts/upstream.md"
CANN = yaml.safe_load((ROOT / "tests/fixtures/cann_facts/cann.yaml").read_text(encoding="utf-8"))["versions"]


def official_950_dockerfile() -> str:
    """The code blocks of the research report's CCI section: the download lines, the final stage's ENV block, the
    URMA steps, the ENTRYPOINT and the run example, in that order."""
    section = A5_FACTS.read_text(encoding="utf-8").split("## 1. CCI", 1)[1].split("## 2.", 1)[0]
    blocks = re.findall(r"```\n(.*?)```", section, re.S)
    assert len(blocks) >= 3, f"{A5_FACTS}: the CCI section's code blocks are gone"
    return "\n".join(blocks)


def test_the_950_images_cann_is_the_one_cann_yaml_holds_for_9_1_0():
    facts = read(official_950_dockerfile(), "9.1.0")
    want = CANN["9.1.0"]
    assert facts.env == {"toolkit": want["env"]["toolkit"], "nnal": want["env"]["nnal"], "other": want["env"]["other"]}
    assert facts.env_scripts == want["env_scripts"]
    assert facts.home == want["layout"]["home"]
    assert {k: facts.packages[k] for k in ("toolkit", "nnal")} == {k: want["packages"][k] for k in ("toolkit", "nnal")}
    # its own part, which cann.yaml's 9.1.0 entry carries beside A2's and A3's
    assert facts.packages["ops"] == {"950": "Ascend-cann-950-ops_9.1.0_linux-{arch}.run"}
    assert want["packages"]["ops"]["950"] == facts.packages["ops"]["950"]


def test_a_changed_env_line_or_an_unknown_package_name_is_seen():
    text = official_950_dockerfile()
    changed = read(text.replace("ENV ATB_MATMUL_SHUFFLE_K_ENABLE=1", "ENV ATB_MATMUL_SHUFFLE_K_ENABLE=0"), "9.1.0")
    assert changed.env["nnal"] != CANN["9.1.0"]["env"]["nnal"]
    assert "ATB_MATMUL_SHUFFLE_K_ENABLE=0" in changed.env["nnal"]
    with pytest.raises(DockerfileError, match="Ascend-cann-950ops_9.1.0_linux-.*not an operator package name"):
        read(text.replace("Ascend-cann-950-ops_", "Ascend-cann-950ops_"), "9.1.0")
    with pytest.raises(DockerfileError, match="names no CANN 9.2.0"):
        read(text, "9.2.0")


def test_the_command_prints_an_entry_for_review(tmp_path, capsys):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(official_950_dockerfile(), encoding="utf-8")
    assert main([str(dockerfile), "--version", "9.1.0", "--path", "cann/9.1.0-950-ubuntu22.04-py3.12/Dockerfile",
                 "--commit", "dc9e733c7b369d5520569e2bedea4ea1edea8493"]) == 0
    entry = yaml.safe_load(capsys.readouterr().out)["9.1.0"]
    assert entry["source"]["commit"] == "dc9e733c7b369d5520569e2bedea4ea1edea8493"
    assert entry["env"]["other"] == ["ATB_CXX_ABI=1"]
    dockerfile.write_text("FROM scratch\n", encoding="utf-8")
    assert main([str(dockerfile), "--version", "9.1.0"]) == 2
    assert "no ENV line of CANN's in the final stage" in capsys.readouterr().err


def test_a_new_cann_s_doubles_come_from_one_script(tmp_path):
    """`new_cann.py --write` for a made-up CANN 9.2.0 (the 950 Dockerfile with its version moved): the cann.yaml entry
    it writes loads, names the 950's operator package and the home under the new version, takes the kernel
    directories from the newest entry with the same chips, and the fake CANN packages are made from it."""
    from tests.fixtures.fake_cann.make_packages import write_packages
    from tests.fixtures.new_cann import entry_for, write_entry

    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(official_950_dockerfile().replace("9.1.0", "9.2.0"), encoding="utf-8")
    facts_file = tmp_path / "cann.yaml"
    facts_file.write_text((ROOT / "tests/fixtures/cann_facts/cann.yaml").read_text(encoding="utf-8"),
                          encoding="utf-8")
    entry = entry_for("9.2.0", [dockerfile], {"repo": "r", "path": "p", "commit": "c"}, facts_file)
    write_entry("9.2.0", entry, facts_file)
    written = yaml.safe_load(facts_file.read_text(encoding="utf-8"))
    new = written["versions"]["9.2.0"]
    assert new["kernel_dirs"] == {"950": "ascend950"}
    assert new["layout"]["home"] == "/usr/local/Ascend/cann-9.2.0"
    assert new["layout"]["links"]["/usr/local/Ascend/ascend-toolkit/latest"] == "/usr/local/Ascend/cann-9.2.0"
    assert new["env"]["toolkit"][0] == "ASCEND_TOOLKIT_HOME=/usr/local/Ascend/cann-9.2.0"
    assert "deliberate_differences" in written and written["versions"]["9.1.0"] == CANN["9.1.0"]
    packages = write_packages(tmp_path / "packages", cann=["9.2.0"], arches=["aarch64"], facts_path=facts_file)
    assert sorted(p.name for p in packages) == ["Ascend-cann-950-ops_9.2.0_linux-aarch64.run",
                                                "Ascend-cann-nnal_9.2.0_linux-aarch64.run",
                                                "Ascend-cann-toolkit_9.2.0_linux-aarch64.run"]
    with pytest.raises(DockerfileError, match="has CANN 9.2.0 already"):
        entry_for("9.2.0", [dockerfile], None, facts_file)
