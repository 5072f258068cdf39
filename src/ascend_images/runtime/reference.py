"""Image references as Docker reads them: the grammar of github.com/distribution/reference (reference.go), so a
reference Docker would refuse is refused here, before a line is printed or a container created.

    reference        := name [ ":" tag ] [ "@" digest ]
    name             := [domain '/'] remote-name
    domain           := host [':' port-number]
    host             := domain-name | IPv4address | '[' IPv6address ']'
    domain-name      := domain-component ['.' domain-component]*
    domain-component := /([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])/
    remote-name      := path-component ['/' path-component]*
    path-component   := alpha-numeric [separator alpha-numeric]*
    alpha-numeric    := /[a-z0-9]+/
    separator        := /[_.]|__|[-]+/
    tag              := /[\\w][\\w.-]{0,127}/
    digest           := algorithm ":" hex   (go-digest: sha256 64, sha384 96, sha512 128 lowercase hex digits)

The first component is a domain when it holds a '.' or a ':', is `localhost`, or has an uppercase letter (Docker's
splitDockerDomain); the name is at most 255 characters (NameTotalLengthMax).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from ascend_images.errors import AscendImagesError

DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
DOMAIN_NAME = re.compile(rf"{DOMAIN_COMPONENT}(?:\.{DOMAIN_COMPONENT})*")
PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[_.]|__|-+)[a-z0-9]+)*")
TAG = re.compile(r"[\w][\w.-]{0,127}", re.ASCII)
DIGEST_HEX = {"sha256": 64, "sha384": 96, "sha512": 128}
NAME_MAX = 255
EXAMPLE = "e.g. ascend-images/sglang:0.5.10, registry.example:5000/team/vllm:1, repo@sha256:<64 hex>"


class ReferenceError(AscendImagesError):
    """Not an image reference Docker accepts."""


@dataclass(frozen=True)
class Reference:
    domain: str  # "" when the reference names none (Docker Hub)
    path: str
    tag: str = ""
    digest: str = ""


def _domain_problem(domain: str) -> str | None:
    host, colon, port = domain.rpartition(":") if not domain.endswith("]") else (domain, "", "")
    if not colon:
        host = domain
    elif not port.isdecimal() or not port.isascii():
        return f"the port of {domain!r} is not a number"
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return f"{host!r} is not an IPv6 address"
        return None
    if not DOMAIN_NAME.fullmatch(host):
        return f"{host!r} is not a host name (letters, digits, '-' and '.')"
    return None


def parse_reference(flag: str, text: str) -> Reference:
    """The reference, or a ReferenceError naming the flag, the value and the rule it breaks."""
    def refuse(rule: str) -> ReferenceError:
        return ReferenceError(f"{flag} {text!r}: not an image reference Docker accepts: {rule} ({EXAMPLE})")

    rest, at, digest = text.partition("@")
    if at:
        algorithm, colon, hexdigits = digest.partition(":")
        if not colon or algorithm not in DIGEST_HEX:
            raise refuse(f"a digest is ALGORITHM:HEX with ALGORITHM one of {', '.join(DIGEST_HEX)}")
        if not re.fullmatch(rf"[0-9a-f]{{{DIGEST_HEX[algorithm]}}}", hexdigits):
            raise refuse(f"a {algorithm} digest is {DIGEST_HEX[algorithm]} lowercase hex digits")
    name, tag = rest, ""
    last_slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > last_slash:  # a colon after the last slash starts the tag; one before it is a registry's port
        name, tag = rest[:colon], rest[colon + 1:]
        if not TAG.fullmatch(tag):
            raise refuse("a tag is 1 to 128 of letters, digits, '_', '.' and '-', not starting with '.' or '-'")
    if not name:
        raise refuse("the repository name is empty")
    if len(name) > NAME_MAX:
        raise refuse(f"the name is {len(name)} characters, more than {NAME_MAX}")
    first, slash, remainder = name.partition("/")
    domain = ""
    if slash and ("." in first or ":" in first or first == "localhost" or first.lower() != first):
        domain, name = first, remainder
        problem = _domain_problem(domain)
        if problem:
            raise refuse(problem)
    for component in name.split("/"):
        if not PATH_COMPONENT.fullmatch(component):
            lower = " (the repository is lowercase)" if component.lower() != component else ""
            raise refuse(f"{component!r} is not a repository path component: lowercase letters and digits, "
                         f"separated by '.', '_', '__' or dashes{lower}")
    return Reference(domain, name, tag, digest)
