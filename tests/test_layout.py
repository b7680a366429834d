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


def test_importing_core_reads_or_writes_no_file_of_the_tree(tmp_path):
    """Importing ``core`` (its learners included) creates, deletes and rewrites nothing: a copy
    of ``core`` with a stale compiled kernel in its cache is left exactly as it was (numba's
    cache management runs only when a process about to compile calls it)."""
    import os
    import shutil
    import subprocess
    import sys

    shutil.copytree(ROOT / "core", tmp_path / "core", ignore=shutil.ignore_patterns("__pycache__"))
    cache = tmp_path / "core" / "_kernels" / "__pycache__"
    cache.mkdir()
    (cache / "spam.spam_l2_dense-1.py312.nbi").write_bytes(b"stale")
    (cache / "aucstream-kernels.sha256").write_text("an old fingerprint")

    def snapshot():
        return {
            path.relative_to(tmp_path).as_posix(): (path.stat().st_mtime_ns, path.stat().st_size)
            for path in tmp_path.rglob("*")
        }

    before = snapshot()
    env = {key: value for key, value in os.environ.items() if key != "NUMBA_CACHE_DIR"}
    env.update(PYTHONPATH=str(tmp_path), PYTHONDONTWRITEBYTECODE="1")
    code = (
        "import core, core.learners, core.metrics, core.validation, core.preprocessing,"
        " core.warmup; core.learners.available_learners(); print(core.__file__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    assert result.stdout.strip() == str(tmp_path / "core" / "__init__.py")
    assert snapshot() == before
