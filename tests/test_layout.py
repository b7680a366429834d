"""docs/architecture.md §1: ``core`` is pure computation and never imports ``service``."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
FORBIDDEN_IN_CORE = {"service", "fastapi", "redis", "uvicorn", "httpx", "pickle", "socket"}


def _imported_roots(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_core_imports_nothing_from_service_or_io_libraries():
    offenders = {}
    files = sorted((ROOT / "core").rglob("*.py"))
    assert files, "core/ has no Python files"
    for path in files:
        bad = _imported_roots(path) & FORBIDDEN_IN_CORE
        if bad:
            offenders[str(path.relative_to(ROOT))] = sorted(bad)
    assert offenders == {}


def test_core_does_not_import_service_at_runtime():
    import subprocess
    import sys

    code = (
        "import sys, core, core.learners, core.metrics, core.validation, core.preprocessing;"
        "core.learners.available_learners();"
        "print(sorted(m for m in sys.modules if m == 'service' or m.startswith('service.')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
