from __future__ import annotations


class FakeClock:
    """A clock the test moves by hand. Starts on a fixed, ordinary day (not near midnight UTC)."""

    def __init__(self, start: float = 1_785_000_000.0) -> None:
        self.value = start

    def __call__(self) -> float:
        return self.value

    def advance(self, seconds: float) -> float:
        self.value += seconds
        return self.value
