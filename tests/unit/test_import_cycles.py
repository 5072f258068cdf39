"""The package imports only downward, imports inside functions included: no module reaches itself again through what
it imports (import-linter's layers contract sees the packages, not circles inside one, such as cli's former
collection -> readme -> clidoc -> collection)."""

from __future__ import annotations

import grimp


def import_cycles(package: str) -> list[list[str]]:
    graph = grimp.build_graph(package, include_external_packages=False)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    cycles: list[list[str]] = []
    walked: set[tuple[str, str]] = set()

    def walk(module: str, path: list[str]) -> None:
        for imported in sorted(edges[module]):
            if imported in path:
                cycles.append([*path[path.index(imported):], imported])
            elif (module, imported) not in walked:
                walked.add((module, imported))
                walk(imported, [*path, imported])

    for module in sorted(edges):
        walk(module, [module])
    return cycles


def test_no_module_imports_itself_back():
    cycles = {" -> ".join(c) for c in import_cycles("ascend_images")}
    assert not cycles, f"import circles: {sorted(cycles)}"
