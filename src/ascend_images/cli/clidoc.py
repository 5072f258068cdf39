"""docs/cli.md, the command-line reference, made from what the command line is: the program's own options, every task
with its one-line description, its arguments and its flags (help, short letter, repeatable) read from the very parser
contexts `invoke` and `ascend-images` parse against, and the exit codes from taskdef.EXIT_CODES. `invoke readme` writes
it between generated markers, as the other pages' sections; `invoke readme --check` fails when it says otherwise."""

from __future__ import annotations

from collections.abc import Callable

from invoke.parser import Argument

from ascend_images.cli.taskdef import EXIT_CODES, summary


def _cell(text: str | None) -> str:
    """A table cell: one line, its `|` escaped (a help such as `image | url | local` would split the row)."""
    return " ".join((text or "").split()).replace("|", "\\|")


# what the program's own options take, as their help says (invoke names no placeholder)
PLACEHOLDERS = {"help": " [TASK]", "list": " [NAMESPACE]", "list-depth": " INT", "list-format": " FORMAT",
                "print-completion-script": " SHELL", "project": " DIR"}


def _flag(argument: Argument) -> tuple[str, str]:
    """The flag as typed (`--name VALUE`, or `-a VALUE` for a one-letter name) and its short letter, if another."""
    value = "" if not argument.takes_value else PLACEHOLDERS.get(argument.name, f" {argument.name.upper()}")
    long = next((n for n in argument.names if len(n) > 1), None)
    if long is None:
        return f"`-{argument.names[0]}{value}`", ""
    short = next((f"`-{n}`" for n in argument.names if len(n) == 1), "")
    return f"`--{long}{value}`", short


def program_options() -> str:
    from ascend_images.cli.collection import tasks
    from ascend_images.cli.program import NAME, OWN_CORE, AscendImagesProgram

    program = AscendImagesProgram(name=NAME, binary=NAME, namespace=tasks())
    rows = ["| option | short | what |", "|---|---|---|"]
    for argument in sorted(program.initial_context.args.values(), key=lambda a: a.name):
        if argument.name in OWN_CORE:
            flag, short = _flag(argument)
            rows.append(f"| {flag} | {short} | {_cell(argument.help)} |")
    return "\n".join(rows)


def task_reference() -> str:
    import inspect

    from ascend_images.cli.collection import tasks

    collection = tasks()
    lines: list[str] = []
    for context in sorted(collection.to_contexts(), key=lambda c: c.name):
        positional = [a.name.upper() for a in context.positional_args]
        lines += [f"### `{' '.join([context.name, *positional])}`", "",
                  summary(inspect.getdoc(collection[context.name]) or ""), ""]
        lines += ["| flag | short | repeatable | what |", "|---|---|---|---|"]
        for argument in sorted(context.args.values(), key=lambda a: (not a.positional, a.name)):
            flag, short = _flag(argument)
            repeatable = "yes" if argument.kind is list else ""
            lines.append(f"| {flag} | {short} | {repeatable} | {_cell(argument.help)} |")
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def exit_codes() -> str:
    rows = ["| code | meaning |", "|---|---|"]
    rows += [f"| {code} | {_cell(meaning)} |" for code, meaning in EXIT_CODES.items()]
    return "\n".join(rows)


SECTIONS: dict[str, Callable[[], str]] = {"program": program_options, "tasks": task_reference,
                                          "exit-codes": exit_codes}
