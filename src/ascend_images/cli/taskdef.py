"""How a task is declared: one table of selection flags given to every task that selects, the short letters from one
table, `-q/--quiet` and `--verbose` in every task, and every failure ended as one line and an exit code.

A task body that selects takes the selection as one argument (`def env(c, sel, json=False)`); its flags (`--device`,
`--backend`, ...) are added to the task's signature here, so a new selection flag is one line of SELECTION and a field
of options.Selection. The source and input flags of the tasks that build travel the same way (SOURCES, INPUTS).

Exit codes, the same in `ascend-images` and `invoke`, one meaning each (EXIT_CODES): 0 done; 1 the task ran and found
something (lint findings, drift, a stale lock, failed image tests, verify findings, a stage that failed to build); 2
the command line is wrong (an unknown task or flag, a missing value or argument, a value, file or matrix refused);
3 an engine, index or registry could not be reached or refused (the same line may work later); 130 interrupted.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from inspect import Parameter
from typing import Any

from invoke import Exit, Task
from invoke import task as invoke_task

from ascend_images import console
from ascend_images.cli.flags import short_flag
from ascend_images.cli.options import InputFlags, Selection, SourceFlags
from ascend_images.errors import AscendImagesError

# generated documentation sections of the command line itself (cli/clidoc.py), registered by cli/entry.py, the one
# module above the task collection: a task module below it (readme) reads them here without importing upward
DOC_SECTIONS: dict[str, Callable[[], str]] = {}

OK = 0
FOUND_PROBLEMS = 1
USAGE_ERROR = VALUE_ERROR = 2  # a value a flag names, or a file it names, is part of the command line
UNREACHABLE = 3
INTERRUPTED = 130
EXIT_CODES = {
    OK: "done",
    FOUND_PROBLEMS: "the task ran and found something: lint findings, drift, a stale lock, failed image tests, "
                    "verify findings, a stage that failed to build",
    USAGE_ERROR: "the command line is wrong: an unknown task or flag, a missing value or argument, a value, file or "
                 "matrix refused (one line on stderr naming the flag and the value; nothing written)",
    UNREACHABLE: "an engine, index or registry could not be reached or refused (try again later, or point to "
                 "another: DOCKER_HOST, --index-url, --registry)",
    INTERRUPTED: "interrupted (Ctrl-C): one line on stderr; what was finished is kept whole, nothing half-written",
}


@dataclass(frozen=True)
class FlagGroup:
    """Flags that travel together into one object a task body takes (`sel`, `sources`, `inputs`): declared once here,
    added to the signature of every task that names the group."""

    param: str  # the body's parameter that receives the object
    make: Callable[..., Any]  # the dataclass of options.py the flags fill
    flags: dict[str, str]  # flag (underscored) -> help
    iterable: tuple[str, ...] = ()  # repeatable flags: a list
    switches: tuple[str, ...] = ()  # flags without a value: False unless given

    def without(self, *names: str) -> FlagGroup:
        return replace(self, flags={k: v for k, v in self.flags.items() if k not in names})


# The selection: what to build, run or check. Every task that selects takes all of these; a new one is a line here
# and a field of options.Selection.
SELECTION = FlagGroup("sel", Selection, {
    "device": "a2, a3 or a5, comma-separated for several; default: each with a default release for the backend",
    "backend": "none, vllm, sglang (comma-separated); default: none",
    "framework": "RL framework over the backend: verl or roll; default: none",
    "release": "a release name from matrix.yaml; default: the matrix's default for (device, backend)",
    "os": "debian12, ubuntu22.04, openeuler24.03; default: the matrix's",
    "arch": "x86_64, aarch64 (comma-separated); default: the matrix's",
    "python": "system or bisheng; default: the matrix's",
    "profile": "environment profile: production (default) or debug",
    "allocator": "memory allocator preloaded (LD_PRELOAD): jemalloc, tcmalloc or none; default: the backend's "
                 "(jemalloc for vllm and sglang, none for none)",
    "env": "KEY=VALUE over the tuned defaults (repeatable)",
    "matrix": "path of the version matrix (default: the project's matrix.yaml)",
}, iterable=("env",))
MATRIX_HELP = SELECTION.flags["matrix"]
# Where a build's inputs come from.
SOURCES = FlagGroup("sources", SourceFlags, {
    "cann_source": "image | url | local (default: the matrix's)",
    "cann_dir": "directory of CANN .run packages (implies --cann-source local)",
    "cann_image": "FROM this image instead of the official CANN image (--cann-source image)",
    "checksums": "sha256sum-style file for downloads the matrix has no checksum for",
    "artifacts_dir": "directory of other downloads (SGLang sources, sgl-kernel-npu zips, BiSheng Python)",
    "torch_index_url": "extra pip index for torch ('' for none); default per arch from the matrix",
    "cache_dir": "download cache filled by `invoke fetch` (default $XDG_CACHE_HOME/ascend-images/downloads, "
                 "~/.cache/ascend-images/downloads)",
    "state_dir": "where this host's trust record is kept (default $XDG_STATE_HOME/ascend-images, "
                 "~/.local/state/ascend-images)",
    "wheel_store": "the host's wheel store, every locked file by its sha256 (default "
                   "$XDG_CACHE_HOME/ascend-images/wheels, ~/.cache/ascend-images/wheels)",
})
# How a build reaches indexes and mirrors, and what it must keep out of its layers.
INPUTS = FlagGroup("inputs", InputFlags, {
    "os_mirror": "replaces the OS's package host during the build (the image keeps stock sources)",
    "pip_index_url": "pip index (may hold credentials; or set ASCEND_IMAGES_PIP_INDEX_URL)",
    "pip_extra_index_url": "extra pip index (repeatable)",
    "pip_trusted_host": "pip trusted host (repeatable)",
    "offline": "no pip index at all: install only from --wheelhouse",
    "wheelhouse": "directory of wheels pip may install from",
    "ca_bundle": "extra CA bundle for TLS during the build (never stored in the image)",
    "netrc": "netrc file with private index credentials (never stored in the image)",
}, iterable=("pip_extra_index_url", "pip_trusted_host"), switches=("offline",))
VOICE_HELP = {"quiet": "no notes or progress on stderr: only results (stdout) and errors",
              "verbose": "notes and warnings in full (e.g. each warning a step only counts)"}


class ProjectTask(Task):
    """invoke's Task with what every task of ours shares. Short letters come from one table (flags.SHORT_FLAGS), not
    from invoke's first-free-letter pick; every task takes --quiet/-q and --verbose, set for the whole process before
    the body runs (console.configure); a task made with `groups=(SELECTION, ...)` takes each group's flags and hands
    its body one object per group. Every exception a body raises ends as one line and an exit code (`run_body`)."""

    def __init__(self, body: Callable[..., Any], *, groups: tuple[FlagGroup, ...] = (),
                 defaults: dict[str, Any] | None = None, **kwargs: Any):
        self.groups = groups
        self.group_defaults = dict(defaults or {})
        group_help = {name: text for group in groups for name, text in group.flags.items()}
        kwargs["help"] = {**VOICE_HELP, **group_help, **(kwargs.get("help") or {})}
        kwargs["iterable"] = [*(n for g in groups for n in g.iterable if n in g.flags), *(kwargs.get("iterable") or [])]
        super().__init__(body, **kwargs)
        # `--list` shows a docstring's first line: the first sentence is made that line, so none is cut mid-sentence
        self.__doc__ = one_line_first(self.__doc__ or "")

    def argspec(self, body: Callable[..., Any]):
        sig = super().argspec(body)
        taken = {group.param for group in self.groups}
        params = [p for p in sig.parameters.values() if p.name not in taken]
        for group in self.groups:
            params += [Parameter(name, Parameter.KEYWORD_ONLY,
                                 default=self.group_defaults.get(name, False if name in group.switches else None))
                       for name in group.flags]
        params += [Parameter(name, Parameter.KEYWORD_ONLY, default=False) for name in VOICE_HELP
                   if name not in sig.parameters]
        return sig.replace(parameters=params)

    def get_arguments(self, ignore_unknown_help: bool | None = None) -> list[Any]:
        # invoke pops each flag's help out of the task as it reads it, so a second parser of the same tasks (the
        # strict reading's, then invoke's own; docs/cli.md's generator) would get none
        kept = dict(self.help)
        try:
            return super().get_arguments(ignore_unknown_help)
        finally:
            self.help = kept

    def arg_opts(self, name: str, default: Any, taken_names: set[str]) -> dict[str, Any]:
        opts = super().arg_opts(name, default, taken_names)
        letter = short_flag(name)
        opts["names"] = [opts["names"][0], *([letter] if letter else [])]
        return opts

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        run_body(console.configure, kwargs.pop("quiet", False), kwargs.pop("verbose", False))
        for group in self.groups:
            values = {name: kwargs.pop(name, None) for name in group.flags}
            for name in group.iterable:
                if name in values:
                    values[name] = list(values[name] or [])
            kwargs[group.param] = group.make(**values)
        try:
            return super().__call__(*args, **kwargs)
        except KeyboardInterrupt:  # invoke would exit 1 without a word
            console.stop_live()
            raise Exit(f"interrupted: {self.name} stopped by Ctrl-C; what it had finished is kept whole, nothing "
                       "half-written is left", code=INTERRUPTED) from None


def summary(doc: str) -> str:
    """A docstring's first sentence on one line: its first paragraph up to the first full stop that ends a sentence."""
    first = " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())
    return re.split(r"(?<=[.!?])\s+(?=[A-Z`])", first, maxsplit=1)[0]


def one_line_first(doc: str) -> str:
    """The docstring with its first sentence joined on the first line (the rest as written)."""
    text = inspect.cleandoc(doc)
    line = summary(text)
    paragraph, _, rest = text.partition("\n\n")
    remainder = " ".join(paragraph.split())[len(line):].strip()
    return "\n\n".join(part for part in (line, remainder, rest) if part)


def task(*args: Any, **kwargs: Any) -> Any:
    """invoke's @task, making ProjectTasks: `@task(groups=(SELECTION,), help={...})`."""
    return invoke_task(*args, klass=ProjectTask, **kwargs)


def run_body(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Every error a task meets ends as one line on stderr and an exit code, never as a traceback."""
    import docker
    import jinja2
    import requests

    from ascend_images.builder.engine import explain
    from ascend_images.errors import BuildError, Interrupted, Unreachable

    try:
        return fn(*args, **kwargs)
    except Interrupted as exc:
        raise Exit(f"interrupted: {exc}", code=INTERRUPTED) from None
    except Unreachable as exc:
        raise Exit(f"error: {exc}", code=UNREACHABLE) from None
    except BuildError as exc:  # the task ran, and a stage did not build: what it found, not the command line's fault
        raise Exit(f"error: {exc}", code=FOUND_PROBLEMS) from None
    except AscendImagesError as exc:
        raise Exit(f"error: {exc}", code=USAGE_ERROR) from None
    except docker.errors.NotFound as exc:  # an image or container the command line named is not there
        raise Exit(f"error: {explain(exc)}", code=USAGE_ERROR) from None
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise Exit(f"error: {explain(exc)}", code=UNREACHABLE) from None
    except BrokenPipeError:  # the reader of stdout has gone (`| head`): the program ends quietly
        raise
    except OSError as exc:  # a file error no flag check foresaw (a directory not writable, a disk full) is one line
        where = f"{exc.filename}: " if exc.filename else ""
        raise Exit(f"error: {where}{exc.strerror or exc}", code=VALUE_ERROR) from None
    except UnicodeDecodeError as exc:
        raise Exit(f"error: a file is not UTF-8 text ({exc})", code=VALUE_ERROR) from None
    except jinja2.TemplateError as exc:  # a template of images/ and the context it was given disagree: ours to mend
        where = f"{exc.name}:{exc.lineno}: " if isinstance(exc, jinja2.TemplateSyntaxError) else ""
        raise Exit(f"error: rendering failed, {where}{exc} (a bug of images/ or its context: please report it)",
                   code=VALUE_ERROR) from None
    finally:  # a step's live line must not outlive its task, however the task ended
        console.stop_live()


def exit_with(code: int) -> None:
    """End a task that ran with the code it returned (1: it found problems)."""
    if code:
        raise Exit(code=code)
