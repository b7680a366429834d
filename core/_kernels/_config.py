"""The one place numba compile flags live (kernels read no other globals).

``cache=True`` keeps compiled machine code on disk next to the module (or in
``NUMBA_CACHE_DIR``) so a restarted service does not pay the JIT again; ``nogil=True`` lets the
service run kernels from threads without holding the GIL.  ``fastmath`` stays off: reassociation
would break the bit-for-bit "same state + same events = same result" contract.

Importing this module (and so ``core``) reads and writes no file: numba touches its cache only
when a kernel is first called, and :func:`drop_stale_cache` runs only when a process that is
about to compile calls it (the service's warm-up, :func:`core.warmup.compile_kernels`, the test
session, the benchmarks).
"""

import hashlib
import os
from pathlib import Path

from numba import njit

JIT_OPTIONS = {"cache": True, "nogil": True, "fastmath": False, "error_model": "numpy"}


def drop_stale_cache(kernels: Path | None = None) -> None:
    """Delete the on-disk kernels next to these modules (``kernels``, by default this folder)
    when any kernel source changed; nothing when ``NUMBA_CACHE_DIR`` is set.

    numba checks a cached kernel against its own file's timestamp only, not against the files
    of the kernels it calls (and inlines): after an edit of ``forgetting.py``, ``oam.py``'s
    cached machine code still runs the old helper.  A pip install or upgrade rewrites every
    file, so users never meet this; a checkout that is edited in place does.  The fingerprint
    of all kernel sources is kept beside the cache; when it differs, the cache goes.  (A cache
    under ``NUMBA_CACHE_DIR``, as in the image, is built once from one source tree.)

    Call it before the process's first kernel call: numba reads a cache index when a kernel is
    first dispatched."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    if kernels is None:
        kernels = Path(__file__).resolve().parent
    cache = kernels / "__pycache__"
    digest = hashlib.sha256()
    for source in sorted(kernels.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    fingerprint = digest.hexdigest()
    stamp = cache / "aucstream-kernels.sha256"
    try:
        if stamp.read_text() == fingerprint:
            return
    except OSError:
        pass
    try:
        for stale in [*cache.glob("*.nbi"), *cache.glob("*.nbc")]:
            stale.unlink(missing_ok=True)
        cache.mkdir(exist_ok=True)
        stamp.write_text(fingerprint)
    except OSError:  # a read-only install: numba then caches elsewhere, or not at all
        pass


def kernel(function):
    """Compile ``function`` with the project's flags: ``@kernel`` instead of ``@njit(...)``."""
    return njit(**JIT_OPTIONS)(function)


def inlined_kernel(function):
    """As :func:`kernel`, inlined into its callers at numba's IR level: for a per-event helper
    that takes many arrays (a call passes each array as seven machine words)."""
    return njit(**JIT_OPTIONS, inline="always")(function)
