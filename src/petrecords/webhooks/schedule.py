"""When a failed delivery is tried again, and when a webhook whose deliveries keep failing is disabled.

A failure is tried again after the waits of PETRECORDS_WEBHOOKS_RETRY_SECONDS in turn (5 s, 30 s, 2 min, 10 min,
30 min by default), then after the last again and again (every hour): each wait counts from the failure before,
as the contract words it, so that an attempt that took its whole timeout still leaves the receiver the wait, and
an instance that comes back after an outage tries once rather than once for every wait it missed. A webhook whose
deliveries have failed, with no success between, for PETRECORDS_WEBHOOKS_DISABLE_AFTER_HOURS since the first
failure is disabled after the failure that ends that time.

Pure functions of the settings, the failures' times and their number: what the delivery keeps in the database
(the first failure's time, how many failures in a row, the last one's time) is all they need."""

from __future__ import annotations

import math
from dataclasses import dataclass

from petrecords.config import Settings

HOUR_MS = 3_600_000


@dataclass(frozen=True)
class RetrySchedule:
    waits_ms: tuple[int, ...]
    """The waits after the first failure in a row, the second, and so on; the last repeats."""
    disable_after_ms: int

    @classmethod
    def from_settings(cls, settings: Settings) -> RetrySchedule:
        return cls(
            # Rounded up: a wait is never 0 ms, which would try again at once.
            waits_ms=tuple(math.ceil(seconds * 1000) for seconds in settings.webhooks_retry_waits),
            disable_after_ms=math.ceil(settings.webhooks_disable_after_hours * HOUR_MS),
        )

    def wait_ms(self, failures: int) -> int:
        """The wait after the `failures`-th failure in a row (1 for the first)."""
        if failures < 1:
            raise ValueError("a wait follows a failure: failures counts from 1")
        return self.waits_ms[min(failures, len(self.waits_ms)) - 1]

    def next_attempt_at(self, *, failed_at_ms: int, failures: int) -> int:
        """When to try again after the `failures`-th failure in a row, which ended at `failed_at_ms`."""
        return failed_at_ms + self.wait_ms(failures)

    def disable_due(self, *, first_failure_ms: int, failed_at_ms: int) -> bool:
        """Whether the failure at `failed_at_ms` disables the webhook: its deliveries have failed, with no success,
        since `first_failure_ms`, for PETRECORDS_WEBHOOKS_DISABLE_AFTER_HOURS or more."""
        return failed_at_ms - first_failure_ms >= self.disable_after_ms
