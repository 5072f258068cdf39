"""`invoke rebuild` hands the flags it was given to the revision's own `invoke build`: each as that task spells it."""

from pathlib import Path

from ascend_images.cli.options import InputFlags, SourceFlags
from ascend_images.cli.rebuild import flag_argv, selection_argv


def test_given_flags_pass_on_and_nothing_else(tmp_path):
    sources = SourceFlags(cann_dir="cann", cache_dir=str(tmp_path / "downloads"))
    inputs = InputFlags(pip_extra_index_url=["https://a.example/simple", "https://b.example/simple"], offline=True,
                        pip_index_url="https://pypi.example/simple")
    argv = flag_argv(sources, inputs)
    assert argv == ["--cann-dir", str(Path("cann").absolute()), "--cache-dir", str(tmp_path / "downloads"),
                    "--pip-index-url", "https://pypi.example/simple",
                    "--pip-extra-index-url", "https://a.example/simple",
                    "--pip-extra-index-url", "https://b.example/simple", "--offline"]
    # SourceFlags.cache_flag says how a task spells --cache-dir; passed as a flag, build refused it (CI, issue 53)
    assert "--cache-flag" not in flag_argv(SourceFlags(), InputFlags())
    assert flag_argv(SourceFlags(), InputFlags()) == []


def test_the_variant_comes_back_from_the_labels():
    labels = {f"io.ascend-images.{k}": v for k, v in {
        "release": "cann9.0.0-sglang0.5.17", "device": "a3", "backend": "sglang", "os": "debian12",
        "arch": "aarch64", "python": "system", "framework": "none", "profile": "production",
        "user-env": '{"HCCL_BUFFSIZE": "400"}'}.items()}
    assert selection_argv(labels, "x:1") == [
        "--release", "cann9.0.0-sglang0.5.17", "--device", "a3", "--backend", "sglang", "--os", "debian12",
        "--arch", "aarch64", "--python", "system", "--profile", "production", "--env", "HCCL_BUFFSIZE=400"]
