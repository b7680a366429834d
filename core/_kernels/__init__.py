"""Private numba kernels. Arrays and scalars in, arrays mutated in place; callers validate."""
