"""One short letter per flag (flags.SHORT_FLAGS): a flag has the same letter in every task that takes it, or none
anywhere; a letter means one flag; `-h` is help's. Read from the parser contexts invoke and ascend-images build from
tasks.py, i.e. what a command line is parsed against."""

from __future__ import annotations

import importlib.util

import pytest

from ascend_images.cli.flags import SHORT_FLAGS

from .helpers import ROOT

Letters = dict[str, dict[str, str | None]]  # flag -> task -> its letter (None: no letter)


def letters_by_flag() -> Letters:
    from invoke import Collection

    spec = importlib.util.spec_from_file_location("ascend_images_tasks_letters", ROOT / "tasks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    table: Letters = {}
    for context in Collection.from_module(module).to_contexts():
        for argument in context.args.values():
            long, *short = argument.names
            assert len(short) <= 1, (context.name, argument.names)
            table.setdefault(long, {})[context.name] = short[0] if short else None
    return table


def inconsistencies(table: Letters) -> list[str]:
    problems = []
    meaning: dict[str, set[str]] = {}
    for flag, per_task in sorted(table.items()):
        if len(set(per_task.values())) > 1:
            problems.append(f"--{flag} has different letters: {per_task}")
        for letter in set(per_task.values()) - {None}:
            meaning.setdefault(letter, set()).add(flag)  # type: ignore[arg-type]
    problems += [f"-{letter} means {sorted(flags)}" for letter, flags in sorted(meaning.items()) if len(flags) > 1]
    problems += [f"-h is help's, not --{next(iter(meaning['h']))}'s"] if "h" in meaning else []
    return problems


TABLE = letters_by_flag()


def test_every_flag_has_one_letter_or_none():
    assert inconsistencies(TABLE) == []


def test_the_letters_are_the_tables():
    for flag, per_task in TABLE.items():
        assert set(per_task.values()) == {SHORT_FLAGS.get(flag)}, (flag, per_task)
    assert {"device", "backend", "env", "matrix", "quiet", "volume", "publish"} <= set(TABLE)
    assert TABLE["verbose"]["run"] is None and TABLE["volume"] == {"run": "v"}  # Docker's -v, so verbose has none


@pytest.mark.parametrize(("broken", "found"), [
    ({"env": {"build": "e", "publish": "n"}}, "--env has different letters"),
    ({"print": {"run": "p"}, "publish": {"run": "p"}}, "-p means ['print', 'publish']"),
    ({"hostname": {"run": "h"}}, "-h is help's"),
])
def test_the_check_fails_on_a_broken_table(broken, found):
    problems = inconsistencies({**TABLE, **broken})
    assert any(p.startswith(found) for p in problems), problems
