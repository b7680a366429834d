"""The README's score-now / label-later example runs as written, with curl, against a real
server: every request succeeds and the label given later is learned."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import httpx

from tests.service.server_helpers import uvicorn_server

README = Path(__file__).resolve().parents[2] / "README.md"


def _example() -> str:
    """The bash block of the README section "Use it: score now, label later"."""
    text = README.read_text()
    section = text[text.index("## Use it") :]
    match = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert match is not None, "no bash block under 'Use it'"
    return match.group(1)


def test_the_readme_example_runs_against_a_server():
    script = _example()
    assert script.count("curl ") == 5 and "/labels" in script
    with uvicorn_server(AUCSTREAM_STORE="memory") as url:
        # -sSf: a refused request fails the script, which stops at the first failure
        runnable = "set -e\n" + script.replace("localhost:8000", url).replace("curl ", "curl -sSf ")
        result = subprocess.run(["bash", "-c", runnable], capture_output=True, text=True,
                                timeout=120)  # fmt: skip
        assert result.returncode == 0, result.stderr
        with httpx.Client(base_url=url, timeout=60) as http:
            counts = http.get("/v1/models/fraud").json()["counts"]
            metrics = http.get("/v1/models/fraud/metrics").json()
    assert counts["events_learned"] == 3  # t1, t2, and t3 once its label came
    assert '"auc"' in result.stdout and metrics["since_start"]["auc"] is not None
