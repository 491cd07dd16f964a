"""The one token bucket: `burst` tokens at the start, refilled at `rate` a second (or one
every `period_s`) up to `burst`, on the caller's clock.

Every rate limit here is one: the client's requests per second (client-go's `qps` and
`burst`), the EventRecorder's spam filter per object, the backstop's and the vertical
controller's taints and evictions. Time is passed in (`now`), so the simulator and the
tests run it on virtual time.
"""

from __future__ import annotations


class TokenBucket:
    __slots__ = ("_period", "burst", "last", "rate", "tokens")

    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        period_s: float | None = None,
        now: float | None = None,
    ) -> None:
        """`period_s`, when given, refills one token per that many seconds (instead of
        `rate` a second, exactly as configured). `now`: when the bucket starts full; None
        starts it at the first `refill`."""
        self.rate = rate
        self.burst = burst
        self._period = period_s
        self.tokens = float(burst)
        self.last = now

    def refill(self, now: float) -> float:
        """Add what `now` brings since the last refill (time going back brings nothing);
        returns the tokens held, fractional, negative while in debt."""
        if self.last is not None and now > self.last:
            elapsed = now - self.last
            gained = elapsed / self._period if self._period is not None else elapsed * self.rate
            self.tokens = min(float(self.burst), self.tokens + gained)
        self.last = now
        return self.tokens

    def available(self, now: float) -> int:
        """The whole tokens held at `now`."""
        return int(self.refill(now) + 1e-9)

    def take(self, n: int = 1) -> None:
        """Spend `n` tokens counted by `available` (never below zero)."""
        self.tokens = max(self.tokens - n, 0.0)

    def try_take(self, now: float) -> bool:
        """Spend one token if one is held at `now`."""
        if self.refill(now) < 1.0:
            return False
        self.tokens -= 1.0
        return True

    def reserve(self, now: float) -> float:
        """Spend one token now, going into debt if none is held; returns how long the
        caller must wait before using it (client-go's `Reserve`)."""
        self.tokens = self.refill(now) - 1.0
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate
