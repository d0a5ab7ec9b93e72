"""The ``aizuchi`` command: the composition root that wires the arbiter, the personas and the benchmarks."""
