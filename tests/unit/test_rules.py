"""Each rule: one variant that passes it and one that breaks it, with the message naming values."""

import pytest

from ascend_images.errors import RuleError
from ascend_images.matrix.rules import RULES_BY_ID, enforce

from .helpers import variant

R85 = "cann8.5.0-pt2.8.0"
SG20 = "cann9.0.0-sglang0.5.20"  # SGLang 0.5.20 on its NPU line (SG: CANN 9.0.0, Python 3.11, 910b and a3)


def set_release(name, **changes):
    def mutate(d):
        d["releases"][name].update(changes)

    return mutate


def set_pins(name, backend, **changes):
    def mutate(d):
        d["releases"][name]["backends"][backend].update(changes)

    return mutate


def pair(torch_npu, **changes):
    def mutate(d):
        d["torch"]["pairs"][torch_npu].update(changes)

    return mutate


def add_cann_82(d, release):
    d["cann"]["releases"]["8.2.RC1"] = dict(d["cann"]["releases"]["8.3.RC1"], hdk_floor="25.2.0")
    d["releases"][release]["cann"] = "8.2.RC1"


def set_kernel_from(release, value):
    def mutate(d):
        d["releases"][release]["backends"]["sglang"]["sgl_kernel_npu"]["from"] = value

    return mutate


R91 = "cann9.1.0-pt2.10.0"  # CANN 9.1.0, torch_npu 2.10.0.post4, vLLM-Ascend 0.23.0: the 950's first line upstream


def support(**changes):
    def mutate(d):
        d["devices"]["a5"]["support"].update(changes)

    return mutate


CASES = [
    # rule id, passing variant kwargs, failing (mutation, kwargs), expected fragment
    ("device-support", dict(release=R91, device="a5", backend="vllm"), (None, dict(release=R85, device="a5")),
     "a5 (Atlas 950 series) needs CANN >= 9.1.0; release 'cann8.5.0-pt2.8.0' has CANN 8.5.0"),
    ("torch-npu-exact-torch", dict(release=R85), (pair("2.8.0.post2", torch="2.7.1"), dict(release=R85)),
     "torch_npu 2.8.0.post2 is paired with torch 2.7.1; valid: torch == 2.8.0"),
    ("torch-npu-python", dict(release=R85), (pair("2.8.0.post2", python=">=3.12"), dict(release=R85)),
     "python 3.11 is outside torch_npu 2.8.0.post2's range >=3.12"),
    ("vllm-ascend-needs-vllm", dict(release=R85, backend="vllm"),
     (set_pins(R85, "vllm", vllm="0.12.0"), dict(release=R85, backend="vllm")),
     "vllm-ascend 0.13.0 is paired with vllm 0.12.0; valid: vllm 0.13.0"),
    ("vllm-ascend-python", dict(release=R85, backend="vllm"),
     (lambda d: d["backends"]["vllm"]["python"].update({"0.13.0": ">=3.12"}), dict(release=R85, backend="vllm")),
     "outside vllm-ascend 0.13.0's range >=3.12"),
    ("vllm-ascend-a3", dict(release=R85, backend="vllm"),
     (set_pins(R85, "vllm", vllm="0.9.1", vllm_ascend="0.9.1"), dict(release=R85, backend="vllm")),
     "vllm-ascend 0.9.1 does not support A3; valid: vllm-ascend >= 0.10.0rc1"),
    # the passing case builds arctic-inference from its sdist, as the real release does on aarch64
    ("vllm-ascend-sdist-sources", dict(release=R85, backend="vllm", arch="aarch64"),
     (set_pins(R85, "vllm", from_sdist={"aarch64": ["arctic-inference", "vllm-ascend"]}),
      dict(release=R85, backend="vllm", arch="aarch64")),
     "builds vllm-ascend 0.13.0 from its PyPI sdist, which has no csrc/third_party/catlass for a3's custom ops"),
    # vLLM-Ascend's setup.py records the device of the SOC_VERSION it was built for, and PyPI's wheel is A2's
    # (its _build_info.py): an A3 image must build it for A3 (VA Dockerfile.a3)
    ("device-build", dict(release=R91, backend="vllm"),
     (lambda d: d["backends"]["vllm"]["device_build"]["devices"].update(a3="wheel"), dict(release=R91, backend="vllm")),
     "a3 installs vllm-ascend from PyPI's wheel (backends.vllm.device_build.devices.a3: wheel), which is a2's build: "
     "its start-up check stops it on a3's chip; valid for a3: sdist (built in the image with "
     "SOC_VERSION=ascend910_9391)"),
    ("sglang-python", dict(release=R85, backend="sglang"),
     (lambda d: d["python"]["system"].update(version="3.12"), dict(release=R85, backend="sglang")),
     "python 3.12 does not satisfy SGLang's ==3.11.*"),
    ("sglang-min-cann", dict(release=R85, backend="sglang"),
     (lambda d: add_cann_82(d, R85), dict(release=R85, backend="sglang")),
     "CANN 8.2.RC1 is below SGLang's floor; valid: CANN >= 8.3.RC1"),
    ("sglang-min-version", dict(release=R85, backend="sglang"),
     (set_pins(R85, "sglang", sglang="0.5.5"), dict(release=R85, backend="sglang")),
     "sglang 0.5.5 has no NPU support; valid: sglang >= 0.5.6"),
    # SG: the 0.5.16-0.5.20 line is built for 910b and a3; a line without 910b (as PR 40524's from 0.5.21) refuses A2
    ("sglang-npu-line", dict(release=SG20, backend="sglang", device="a2"),
     (lambda d: d["backends"]["sglang"]["npu_lines"][0].update(chips=["a3"]),
      dict(release=SG20, backend="sglang", device="a2")),
     "upstream builds SGLang 0.5.20's NPU images for a3, not 910b (a2): its NPU line (>=0.5.16,<0.5.21) dropped it"),
    ("hdk-floor-from-cann", dict(release=R85), (set_release(R85, hdk_floor="25.3.RC1"), dict(release=R85)),
     "release declares HDK >= 25.3.RC1 but CANN 8.5.0 needs HDK >= 25.5.0"),
    ("sgl-kernel-npu-coverage", dict(release=R85, backend="sglang"),
     (set_kernel_from("cann8.3.rc1-sglang0.5.8", "release"), dict(release="cann8.3.rc1-sglang0.5.8", backend="sglang")),
     # 2026.01.21's release matrix built CANN 8.5.0 with torch 2.8.0 only (SG, written out here)
     "sgl-kernel-npu 2026.01.21 publishes zips for CANN 8.5.0 + torch 2.8.0 + Python 3.11; this release has CANN "
     "8.3.RC1 + torch 2.7.1 + Python 3.11"),
    ("torch-npu-cann-pair", dict(release=R85),
     (None, dict(release="cann8.3.rc1-sglang0.5.8")),
     "torch_npu 2.7.1.post2 was released for CANN 8.5.0, the release uses CANN 8.3.RC1"),
    ("task-queue-graph-mode", dict(release=R85, backend="vllm"),
     (None, dict(release=R85, backend="vllm", env={"TASK_QUEUE_ENABLE": "2"})),
     "TASK_QUEUE_ENABLE=2 (from user) with vLLM's default graph mode"),
    ("bisheng-python-arch", dict(release=R85, python="bisheng", arch="aarch64"),
     (None, dict(release=R85, python="bisheng", arch="x86_64")),
     "python 'bisheng' is only known for aarch64, not x86_64"),
]


@pytest.mark.parametrize("mutate,kwargs,fragment", [
    # what upstream ships the 950 with, each limit broken alone (values written out from the release notes)
    (support(cann=None, torch_npu="2.10.0.post6"), dict(backend="none"),
     "a5 (Atlas 950 series) needs torch_npu >= 2.10.0.post6; release 'cann9.1.0-pt2.10.0' has torch_npu 2.10.0.post4"),
    (support(cann=None, vllm_ascend="0.26.0rc1"), dict(backend="vllm"),
     "a5 (Atlas 950 series) needs vllm-ascend >= 0.26.0rc1; release 'cann9.1.0-pt2.10.0' has vllm-ascend 0.23.0"),
    (None, dict(backend="vllm", framework="verl"),
     "no verl image for a5 (Atlas 950 series): verl ships no 950 install"),
    (support(backends=["none"]), dict(backend="vllm"),
     "no vllm image for a5 (Atlas 950 series): upstream ships it with none only; valid backends: none"),
], ids=["torch-npu", "vllm-ascend", "framework", "backend"])
def test_the_950_is_built_only_where_upstream_ships_it(tmp_path, mutate, kwargs, fragment):
    detail = RULES_BY_ID["device-support"].check(variant(tmp_path, mutate, release=R91, device="a5", **kwargs))
    assert detail is not None and fragment in detail, detail
    # A2 and A3 have no such limits: the same selection passes there
    assert RULES_BY_ID["device-support"].check(variant(tmp_path / "a3", None, release=R91, **kwargs)) is None


def test_every_rule_has_a_case():
    assert {c[0] for c in CASES} == set(RULES_BY_ID)


@pytest.mark.parametrize("rule_id,ok,bad,fragment", CASES, ids=[c[0] for c in CASES])
def test_rule_passes_and_fails(tmp_path, rule_id, ok, bad, fragment):
    rule = RULES_BY_ID[rule_id]
    assert rule.check(variant(tmp_path / "ok", **ok)) is None
    mutate, kwargs = bad
    (tmp_path / "bad").mkdir()
    detail = rule.check(variant(tmp_path / "bad", mutate, **kwargs))
    assert detail is not None and fragment in detail


def test_enforce_raises_on_errors_and_reports_warnings(tmp_path):
    bad = variant(tmp_path, pair("2.8.0.post2", torch="2.7.1"), release=R85)
    warnings = []
    with pytest.raises(RuleError) as err:
        enforce([bad], warn=warnings.append)
    text = str(err.value)
    assert "error [torch-npu-exact-torch]" in text and "source: PT" in text

    warned = variant(tmp_path, None, release="cann8.3.rc1-sglang0.5.8")
    found = enforce([warned], warn=warnings.append)
    assert [v.rule.id for v in found] == ["torch-npu-cann-pair"]
    assert any("warning [torch-npu-cann-pair]" in w for w in warnings)


def test_rule_statements_are_stated_from_the_matrix(tmp_path):
    """A threshold the matrix holds is stated from it, never restated in prose beside the data."""
    from ascend_images.matrix.model import load_matrix

    from .helpers import mutated_matrix

    spec = load_matrix(mutated_matrix(tmp_path, lambda d: d["backends"]["sglang"].update(
        min_cann="8.5.0", kernel_releases=[{"tags": ["a", "b"], "builds": [], "source": "x"}]))).spec
    assert RULES_BY_ID["sglang-min-cann"].stated(spec) == "SGLang on NPU needs CANN >= 8.5.0"
    assert RULES_BY_ID["sgl-kernel-npu-coverage"].stated(spec) == \
        "sgl-kernel-npu publishes release zips for the builds its release matrix lists (backends.sglang." \
        "kernel_releases: 2 tags)"
    assert RULES_BY_ID["vllm-ascend-a3"].stated(spec) == "A3 support starts at vllm-ascend 0.10.0rc1"


def test_a_pair_whose_cann_no_source_names_is_a_warning_saying_so(tmp_path):
    detail = RULES_BY_ID["torch-npu-cann-pair"].check(variant(tmp_path, pair("2.8.0.post2", cann=None), release=R85))
    assert detail == ("torch_npu 2.8.0.post2: no upstream source says which CANN it was released for (matrix.yaml "
                      "torch.pairs has cann: null); the release uses CANN 8.5.0, unconfirmed")
    assert RULES_BY_ID["torch-npu-cann-pair"].severity == "warning"


@pytest.mark.parametrize("change,fragment", [
    # PR 40524's line: Python 3.12 (sgl-kernel-npu 2026.9.0.post5 py312 only), CANN 9.1.0, written out here
    ({"python": "3.12", "why": "sgl-kernel-npu 2026.9.0.post5 py312 only"},
     "SGLang 0.5.20's NPU line is Python 3.12, this variant has Python 3.11 "
     "(sgl-kernel-npu 2026.9.0.post5 py312 only)"),
    ({"cann": "9.1.0"}, "SGLang 0.5.20's NPU line is CANN 9.1.0, this release has CANN 9.0.0"),
])
def test_an_sglang_release_off_its_npu_lines_python_or_cann_is_refused(tmp_path, change, fragment):
    def mutate(d):
        d["backends"]["sglang"]["npu_lines"][0].update(change)

    detail = RULES_BY_ID["sglang-npu-line"].check(variant(tmp_path, mutate, release=SG20, backend="sglang"))
    assert detail == fragment


def test_a_device_whose_build_its_release_cannot_make_has_no_variant(tmp_path):
    """vLLM-Ascend 0.13.0's PyPI wheel is A2's build, and its sdist lacks the catlass sources A3's kernels need (its
    file list, written out in matrix.yaml): no A3 image of that release, and A2 keeps its wheel."""
    detail = RULES_BY_ID["device-support"].check(variant(tmp_path, None, release=R85, backend="vllm"))
    assert detail == (
        "no vllm image for a3 (Atlas 800T/800I A3 (Ascend 910_93)) on release 'cann8.5.0-pt2.8.0': a3 builds "
        "vllm-ascend from its sdist (backends.vllm.device_build), and vllm-ascend 0.13.0's sdist has no "
        "csrc/third_party/catlass for the device's custom ops (backends.vllm.sdist_lacks_catlass), while PyPI's wheel "
        "is a2's build; valid: a release whose vllm-ascend sdist carries catlass (not 0.13.0, 0.18.0)"), detail
    a2 = variant(tmp_path, None, release=R85, backend="vllm", device="a2")
    assert RULES_BY_ID["device-support"].check(a2) is None and RULES_BY_ID["device-build"].check(a2) is None
