"""Without Chromium the browser tests are skipped with a message saying what to install, and
the rest of the run goes on; with ``AUCSTREAM_REQUIRE_BROWSER=1`` (``.ci/run``, which installs
the browser) they fail instead, so CI cannot pass without having run them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _pytest_without_a_browser(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """The browser tests and one other test, run with a PATH holding only Python."""
    no_browser = tmp_path / "bin"
    no_browser.mkdir()
    (no_browser / "python").symlink_to(sys.executable)
    environment = {key: value for key, value in os.environ.items()
                   if key != "AUCSTREAM_REQUIRE_BROWSER"}  # fmt: skip
    environment.update(PATH=str(no_browser), PYTHONPATH=str(ROOT), **env)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "-q",
         "tests/service/test_dashboard_browser.py",
         "tests/service/test_settings.py::test_environment_is_read"],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_without_chromium_the_browser_tests_skip_and_the_run_goes_on(tmp_path):
    result = _pytest_without_a_browser(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "error" not in result.stdout.lower().split("short test summary")[-1]
    assert "apt-get install chromium chromium-driver" in result.stdout
    assert "AUCSTREAM_REQUIRE_BROWSER=1 makes this a failure" in result.stdout
    assert "passed" in result.stdout and "skipped" in result.stdout


def test_ci_fails_when_the_browser_tests_could_not_run(tmp_path):
    result = _pytest_without_a_browser(tmp_path, AUCSTREAM_REQUIRE_BROWSER="1")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "AUCSTREAM_REQUIRE_BROWSER=1 and no browser" in result.stdout
    assert " errors" in result.stdout and "1 passed" in result.stdout  # the fixture fails
    assert "skipped" not in result.stdout


def test_ci_requires_the_browser():
    assert "export AUCSTREAM_REQUIRE_BROWSER=1" in (ROOT / ".ci/run").read_text()
