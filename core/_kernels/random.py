"""A tiny deterministic PRNG whose whole state is one uint64 array element.

Reservoir sampling (:func:`reservoir_slot`, the one Algorithm R of every kernel) and any other
randomness inside kernels draw from here, with the state
passed in as ``rng_state`` (shape (1,), uint64) and stored with the learner, so a learner
restored from its state continues with the same draws (pynndescent passes its RNG the same way).

SplitMix64 (Steele, Lea, Flood 2014): passes BigCrush, one add and three xor-shift-multiplies.
"""

import numpy as np

from core._kernels._config import kernel


@kernel
def next_uint64(rng_state):
    rng_state[0] = rng_state[0] + np.uint64(0x9E3779B97F4A7C15)
    z = rng_state[0]
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@kernel
def random_below(rng_state, n):
    """A uniform integer in [0, n) (n >= 1), without modulo bias (Lemire's rejection)."""
    bound = np.uint64(n)
    threshold = (np.uint64(0) - bound) % bound
    while True:
        value = next_uint64(rng_state)
        if value >= threshold:
            return np.int64(value % bound)


@kernel
def random_unit(rng_state):
    """A uniform float in [0, 1) with 53 random bits."""
    return np.float64(next_uint64(rng_state) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@kernel
def reservoir_slot(rng_state, count, capacity):
    """Vitter's Algorithm R (thesis Alg. 5): the slot the ``count``-th event of a class goes to.

    ``count`` includes the current event (1-based).  While the buffer is filling the event takes
    the next free slot; afterwards it is kept with probability ``capacity / count`` and then
    replaces a uniformly chosen slot (one draw ``j ~ U{0..count-1}`` decides both: keep iff
    ``j < capacity``, slot ``j``).  Returns -1 when the event is not kept.
    """
    if count <= capacity:
        return count - 1
    j = random_below(rng_state, count)
    if j < capacity:
        return j
    return -1


def seed_state(random_state) -> np.ndarray:
    """The initial ``rng_state`` array for an integer seed (None means 0: learners are
    deterministic by default, as a service needs)."""
    seed = 0 if random_state is None else int(random_state)
    return np.array([seed % (1 << 64)], dtype=np.uint64)
