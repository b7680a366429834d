"""The check of a failed ``aucstream`` command, shared by the CLI tests (test_cli.py,
test_cli_parity.py, test_cli_tables.py)."""

from __future__ import annotations


def failed(capsys, status: int, *fragments: str) -> str:
    """The error of a failed command: exactly one line on stderr, naming ``fragments``."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aucstream: "), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]
