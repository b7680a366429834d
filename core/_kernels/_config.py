"""The one place numba compile flags live (kernels read no other globals).

``cache=True`` keeps compiled machine code on disk next to the module (or in
``NUMBA_CACHE_DIR``) so a restarted service does not pay the JIT again; ``nogil=True`` lets the
service run kernels from threads without holding the GIL.  ``fastmath`` stays off: reassociation
would break the bit-for-bit "same state + same events = same result" contract.
"""

from numba import njit

JIT_OPTIONS = {"cache": True, "nogil": True, "fastmath": False, "error_model": "numpy"}


def kernel(function):
    """Compile ``function`` with the project's flags: ``@kernel`` instead of ``@njit(...)``."""
    return njit(**JIT_OPTIONS)(function)


def inlined_kernel(function):
    """As :func:`kernel`, inlined into its callers at numba's IR level: for a per-event helper
    that takes many arrays (a call passes each array as seven machine words)."""
    return njit(**JIT_OPTIONS, inline="always")(function)
