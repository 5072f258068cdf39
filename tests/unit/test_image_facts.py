"""The image checks' facts (tests/image/facts.py) are asked once per image and asking code: kept between runs for
every change's tier, asked again by the full tier, and asked again whenever the image or the code changes."""

from __future__ import annotations

import pytest

from tests.image import facts


@pytest.fixture
def kept(tmp_path, monkeypatch):
    monkeypatch.setattr(facts, "KEPT", tmp_path / "facts")
    monkeypatch.setattr(facts, "FRESH", False)
    return tmp_path / "facts"


def asker(answers: list[str]):
    def compute():
        answers.append("asked")
        return {"n": len(answers)}

    return compute


def test_a_fact_is_asked_once_per_image_and_code_across_runs(kept, monkeypatch):
    asked: list[str] = []
    assert facts.session_fact("sha256:aa", "pip", asker(asked), "code 1") == {"n": 1}
    monkeypatch.setattr(facts, "SESSION", "another-run")
    assert facts.session_fact("sha256:aa", "pip", asker(asked), "code 1") == {"n": 1}  # kept: not asked again
    assert asked == ["asked"]
    assert facts.session_fact("sha256:bb", "pip", asker(asked), "code 1") == {"n": 2}  # another image
    assert facts.session_fact("sha256:aa", "pip", asker(asked), "code 2") == {"n": 3}  # the asking code changed
    assert len(asked) == 3


def test_the_full_tier_asks_each_fact_again_once_and_keeps_it(kept, monkeypatch):
    asked: list[str] = []
    facts.session_fact("sha256:aa", "pip", asker(asked), "code")
    monkeypatch.setattr(facts, "FRESH", True)
    monkeypatch.setattr(facts, "SESSION", "full-tier")
    assert facts.session_fact("sha256:aa", "pip", asker(asked), "code") == {"n": 2}  # asked again
    assert facts.session_fact("sha256:aa", "pip", asker(asked), "code") == {"n": 2}  # once in that session
    monkeypatch.setattr(facts, "FRESH", False)
    monkeypatch.setattr(facts, "SESSION", "next-change")
    assert facts.session_fact("sha256:aa", "pip", asker(asked), "code") == {"n": 2}  # the full tier's answer kept
    assert len(asked) == 2


def test_a_fact_that_fails_to_be_asked_is_not_kept(kept):
    def broken():
        raise RuntimeError("the container died")

    with pytest.raises(RuntimeError):
        facts.session_fact("sha256:aa", "pip", broken, "code")
    asked: list[str] = []
    assert facts.session_fact("sha256:aa", "pip", asker(asked), "code") == {"n": 1}
