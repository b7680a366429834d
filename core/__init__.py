"""aucstream core: pure computation (numpy + numba), no I/O and no service imports.

Layout
------
``core._kernels``   @njit kernels: arrays and scalars in, arrays mutated in place, no validation.
``core.learners``   scikit-learn style learners over the kernels, registered by name.
``core.metrics``    exact AUC / pAUC / ROC, prequential windows, regret.
``core.validation`` input coercion shared by every learner (dense, CSR, labels).
``core.preprocessing`` online scaling; ``core.hashing`` stable feature hashing.
"""
