"""Golden stored states: a state of every registered learner and of a default service model,
written by the code of the current state format version (see :mod:`.regenerate`)."""
