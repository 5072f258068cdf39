"""The reader check of tests/image/test_env_readers.py fails on a variable taken back to its old name (issue 62): in a
container of the vLLM-Ascend 0.23.0 image CI built, env.json is made to say what a matrix that still baked
VLLM_ASCEND_ENABLE_FLASHCOMM (reference 000's name, read by vLLM-Ascend up to 0.18.0) would bake, and the check names
the variable, the image and the reader it expected; on the image as built it finds nothing."""

from __future__ import annotations

import pytest

from tests.image.test_env_readers import unread_variables

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_the_reader_check_fails_on_a_variable_taken_back_to_its_old_name(ci_build, docker_client):
    import testinfra

    image = ci_build.stage("vllm", backend="vllm")
    box = docker_client.containers.run(image, ["sleep", "infinity"], detach=True,
                                       environment={"ASCEND_PREFLIGHT": "off"})
    try:
        host = testinfra.get_host(f"docker://{box.id}")
        assert unread_variables(host, image) == []
        host.check_output("sed -i 's/\"VLLM_ASCEND_ENABLE_FLASHCOMM1\"/\"VLLM_ASCEND_ENABLE_FLASHCOMM\"/' "
                          "/etc/ascend-images/env.json")
        unread = unread_variables(host, image)
        assert len(unread) == 1, unread
        assert unread[0].startswith(f"VLLM_ASCEND_ENABLE_FLASHCOMM: baked in {image}, and its reader (vllm_ascend: ")
        assert unread[0].endswith("names it in none of its installed files"), unread
    finally:
        box.remove(force=True)
