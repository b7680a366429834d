"""Write or check constraints.txt: the exact version of every package `aucstream[dev]` installs.

The README's two commands and .ci/run install with ``-c constraints.txt``, so a fresh machine
gets the versions the tests last passed with, not whatever the registry serves that day.

    python .ci/constraints.py          # rewrite constraints.txt from this environment
    python .ci/constraints.py --check  # exit 1 if a package installed for aucstream[dev] is
                                       # missing from constraints.txt or at another version

Update it on purpose: ``pip install -U -e ".[dev]"``, run the tests, then rewrite it.
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints.txt"
HEADER = "# Written by .ci/constraints.py from an environment that passed .ci/run; do not edit.\n"


def closure(name: str, extras: tuple[str, ...]) -> dict[str, str]:
    """Every installed distribution `name[extras]` pulls in, with its version, by key."""
    found: dict[str, tuple[str, str, set[str]]] = {}

    def visit(dist_name: str, wanted: tuple[str, ...]) -> None:
        key = canonicalize_name(dist_name)
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            return  # a marker-excluded or optional requirement that is not installed
        first = key not in found
        entry = found.setdefault(key, (dist.metadata["Name"], dist.version, set()))
        new_extras = set(wanted) - entry[2]
        if not first and not new_extras:
            return
        entry[2].update(wanted)
        for line in dist.requires or []:
            req = Requirement(line)
            envs = [{"extra": e} for e in ["", *sorted(entry[2])]]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                visit(req.name, tuple(req.extras))

    visit(name, extras)
    found.pop(canonicalize_name(name), None)
    return {key: f"{n}=={v}" for key, (n, v, _) in sorted(found.items())}


def main() -> int:
    pins = closure("aucstream", ("dev",))
    if "--check" not in sys.argv[1:]:
        CONSTRAINTS.write_text(HEADER + "".join(f"{pin}\n" for pin in pins.values()))
        print(f"wrote {len(pins)} pins to {CONSTRAINTS.name}")
        return 0
    written = {
        canonicalize_name(line.split("==")[0]): line.strip()
        for line in CONSTRAINTS.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    wrong = [pin for key, pin in pins.items() if written.get(key) != pin]
    for pin in wrong:
        print(f"constraints.txt does not pin {pin} (python .ci/constraints.py rewrites it)")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
