"""Bundles of kernel arguments: namedtuples, which numba passes to a kernel as one argument.

A kernel with many arrays takes them bundled so a call reads "batch, state, hyper-parameters"
(STYLE: no kernel above ~12 arguments).  Each bundle is a plain ``collections.namedtuple`` at
module level (numba's cache pickles its type); a kernel unpacks it on entry, so the arithmetic,
and with it every result, is the same as with separate arguments.
"""

from collections import namedtuple

#: One batch of events: dense rows in ``X`` or, with ``sparse``, the CSR arrays (the other
#: side empty arrays of the right dtype).
EventBatch = namedtuple("EventBatch", ["X", "indptr", "indices", "data", "sparse"])
