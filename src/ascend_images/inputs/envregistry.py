"""A backend release's environment registry, read from its wheel (issue 62): vLLM-Ascend's `vllm_ascend/envs.py`,
SGLang's `sglang/srt/environ.py`. `invoke outdated` says, for a newer release, which variables the matrix bakes for
that package its code no longer names, and which of its prefix the registry adds over the release the matrix has."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from packaging.utils import canonicalize_name


@dataclass(frozen=True)
class Registry:
    member: str  # the file in the wheel, e.g. vllm_ascend/envs.py
    prefix: str  # the variables it defines begin so (VLLM_ASCEND_, SGLANG_)

    def names(self, text: str) -> set[str]:
        return set(re.findall(rf"\b({re.escape(self.prefix)}[A-Z0-9_]+)\b", text))

    def is_member(self, name: str) -> bool:
        return name == self.member  # a wheel's packages sit at its root


REGISTRIES = {
    "vllm-ascend": Registry("vllm_ascend/envs.py", "VLLM_ASCEND_"),
    "sglang": Registry("sglang/srt/environ.py", "SGLANG_"),
}


@dataclass(frozen=True)
class EnvChange:
    gone: tuple[str, ...]  # baked for the package, and the new release's code does not name them
    added: tuple[str, ...]  # the new release's registry has them, the matrix's release did not

    def notes(self, package: str, version: str) -> list[str]:
        out = []
        if self.gone:
            out.append(f"env: {package} {version}'s {REGISTRIES[package].member} no longer names "
                       f"{', '.join(self.gone)} (baked for it: matrix.yaml env, its reader's versions)")
        if self.added:
            out.append(f"env: {REGISTRIES[package].member} adds {', '.join(self.added)}")
        return out


def env_change(package: str, new_text: str, baked: Iterable[str], old_text: str | None) -> EnvChange:
    """What a newer release's registry (`new_text`) changes: of `baked` (what the matrix bakes for the package),
    those it no longer names; the names it adds over `old_text` (the matrix's release's registry; None when that
    could not be read: then over `baked`)."""
    registry = REGISTRIES[canonicalize_name(package)]
    new = registry.names(new_text)
    old = registry.names(old_text) if old_text is not None else set(baked)
    # a baked name outside the prefix (SOC_VERSION) is named or not anywhere in the file, as a whole word
    gone = (n for n in set(baked) if not re.search(rf"\b{re.escape(n)}\b", new_text))
    return EnvChange(tuple(sorted(gone)), tuple(sorted(new - old)))


def read_registry(url: str, package: str, read_member: Callable[[str, Callable[[str], bool]], bytes | None]
                  ) -> str | None:
    data = read_member(url, REGISTRIES[canonicalize_name(package)].is_member)
    return data.decode("utf-8", "replace") if data is not None else None
