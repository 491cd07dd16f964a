"""Leader election over a coordination.k8s.io Lease, so that of several replicas of a
component exactly one acts at a time.

The rules are client-go's: the holder renews the Lease every `retry_period_s`; another
candidate takes over only once it has watched the same record stay unchanged for the
record's `leaseDurationSeconds` *on its own clock* (so clock skew between machines does not
matter, only their rates); a holder that could not renew for `renew_deadline_s` stops
leading, which is shorter than the lease duration, so it has stepped down before anyone
may take over. A holder that shuts down cleanly empties `holderIdentity`, and the next
candidate takes over at once.

`decide` is the pure rule; `LeaderElector` reads and writes the Lease through the
`Cluster` protocol on an injected `now`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Literal

from pykatalyst.api import names
from pykatalyst.api.timefmt import format_microtime, parse_rfc3339
from pykatalyst.cluster.protocol import JSON, AlreadyExists, ApiError, Cluster, Conflict, NotFound

Action = Literal["create", "acquire", "renew", "takeover", "follow", "release"]


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The Lease spec fields that leader election reads and writes. `holder` is "" when
    nobody holds the lease."""

    holder: str
    duration_s: int
    acquire_time: float | None = None
    renew_time: float | None = None
    transitions: int = 0

    @classmethod
    def from_lease(cls, obj: JSON) -> LeaseRecord:
        spec = obj.get("spec") or {}

        def when(key: str) -> float | None:
            text = spec.get(key)
            if not isinstance(text, str) or not text:
                return None
            try:
                return parse_rfc3339(text)
            except ValueError:
                return None

        duration = spec.get("leaseDurationSeconds")
        transitions = spec.get("leaseTransitions")
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            duration_s=int(duration) if isinstance(duration, int | float) else 0,
            acquire_time=when("acquireTime"),
            renew_time=when("renewTime"),
            transitions=int(transitions) if isinstance(transitions, int) else 0,
        )

    def spec_json(self) -> JSON:
        spec: JSON = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration_s,
            "leaseTransitions": self.transitions,
        }
        if self.acquire_time is not None:
            spec["acquireTime"] = format_microtime(self.acquire_time)
        if self.renew_time is not None:
            spec["renewTime"] = format_microtime(self.renew_time)
        return spec


@dataclass(frozen=True, slots=True)
class LeaseDecision:
    """What a candidate should do now. `record` is what to write (None for `follow`);
    `holder` who leads once that is done; `expires_at`, for `follow`, when (on the
    candidate's clock) the current holder's lease runs out unless renewed."""

    action: Action
    holder: str
    record: LeaseRecord | None
    reason: str
    expires_at: float | None = None


def decide(
    current: LeaseRecord | None,
    observed_at: float | None,
    identity: str,
    now: float,
    duration_s: float,
) -> LeaseDecision:
    """The election rule. `current` is the Lease as read (None: there is none);
    `observed_at` when this candidate first saw exactly that record (None: just now)."""
    if not identity:
        raise ValueError("identity: must be a non-empty string naming this candidate")
    if duration_s <= 0:
        raise ValueError(f"duration_s: must be positive, got {duration_s}")
    seconds = max(1, math.ceil(duration_s))
    if current is None:
        return LeaseDecision(
            "create",
            identity,
            LeaseRecord(identity, seconds, now, now, 0),
            "no lease yet: creating it",
        )
    if current.holder == identity:
        return LeaseDecision(
            "renew",
            identity,
            replace(current, duration_s=seconds, renew_time=now),
            "renewing our own lease",
        )
    taken = LeaseRecord(identity, seconds, now, now, current.transitions + 1)
    if not current.holder:
        return LeaseDecision("acquire", identity, taken, "the lease is free")
    seen = now if observed_at is None else observed_at
    expires = seen + current.duration_s
    if now >= expires:
        return LeaseDecision(
            "takeover",
            identity,
            taken,
            f"{current.holder} has not renewed for {now - seen:g}s "
            f"(lease {current.duration_s}s): taking over",
        )
    return LeaseDecision(
        "follow",
        current.holder,
        None,
        f"{current.holder} holds the lease (up in {expires - now:g}s unless renewed)",
        expires_at=expires,
    )


@dataclass(frozen=True, slots=True)
class LeaderConfig:
    """client-go's defaults: 15s lease, 10s renew deadline, 2s retry period."""

    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    def __post_init__(self) -> None:
        if self.retry_period_s <= 0:
            raise ValueError(f"retry_period_s: must be positive, got {self.retry_period_s}")
        if not self.retry_period_s < self.renew_deadline_s:
            raise ValueError(
                f"renew_deadline_s ({self.renew_deadline_s:g}) must be longer than "
                f"retry_period_s ({self.retry_period_s:g}): a leader renews several times "
                "before it gives up"
            )
        if not self.renew_deadline_s < self.lease_duration_s:
            raise ValueError(
                f"lease_duration_s ({self.lease_duration_s:g}) must be longer than "
                f"renew_deadline_s ({self.renew_deadline_s:g}): a leader that cannot renew "
                "must step down before another candidate may take over"
            )


@dataclass(frozen=True, slots=True)
class LeaderState:
    """One election round as the caller sees it."""

    time: float
    leading: bool
    holder: str
    action: Action | Literal["error"]
    message: str
    became_leader: bool = False
    lost_leadership: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "leading": self.leading,
            "holder": self.holder,
            "action": self.action,
            "message": self.message,
        }


class LeaderElector:
    """Holds (or waits for) the Lease `namespace/name` as `identity`.

    Call `tick(now)` every `config.retry_period_s`; act only while `leading(now)` is true,
    which also turns false by itself when renewals have failed for the renew deadline.
    """

    def __init__(
        self,
        cluster: Cluster,
        identity: str,
        *,
        name: str = names.CONTROLLER_LEASE_NAME,
        namespace: str = names.SYSTEM_NAMESPACE,
        config: LeaderConfig | None = None,
    ) -> None:
        if not identity:
            raise ValueError("identity: must be a non-empty string naming this candidate")
        self.cluster = cluster
        self.identity = identity
        self.name = name
        self.namespace = namespace
        self.config = config if config is not None else LeaderConfig()
        self.holder = ""
        self._leading = False
        self._last_renew: float | None = None
        self._observed: LeaseRecord | None = None
        self._observed_at: float | None = None

    def leading(self, now: float) -> bool:
        """True while this candidate holds the lease and renewed it within the deadline."""
        return (
            self._leading
            and self._last_renew is not None
            and now - self._last_renew < self.config.renew_deadline_s
        )

    def tick(self, now: float) -> LeaderState:
        was = self._leading
        try:
            obj: JSON | None = self.cluster.get(names.LEASE, self.name, self.namespace)
        except NotFound:
            obj = None
        except ApiError as exc:
            return self._failed(now, was, f"cannot read lease {self._key}: {exc}")
        current = LeaseRecord.from_lease(obj) if obj is not None else None
        if current != self._observed:
            self._observed, self._observed_at = current, now
        decision = decide(
            current, self._observed_at, self.identity, now, self.config.lease_duration_s
        )
        if decision.record is None:
            self._leading = False
            self.holder = decision.holder
            return self._state(now, was, decision.action, decision.reason)
        try:
            self._write(obj, decision.record)
        except (Conflict, AlreadyExists):
            # Somebody else wrote the lease between our read and our write: they won.
            self._observed = None
            return self._failed(now, was, f"lease {self._key} changed under us; re-reading")
        except ApiError as exc:
            return self._failed(now, was, f"cannot write lease {self._key}: {exc}")
        self._leading = True
        self._last_renew = now
        self.holder = self.identity
        self._observed, self._observed_at = decision.record, now
        return self._state(now, was, decision.action, decision.reason)

    def release(self, now: float) -> bool:
        """Hand the lease back (holder emptied) so the next candidate need not wait for it
        to expire. True when it was ours and is now free."""
        if not self._leading:
            return False
        self._leading = False
        try:
            obj = self.cluster.get(names.LEASE, self.name, self.namespace)
        except ApiError:
            return False
        current = LeaseRecord.from_lease(obj)
        if current.holder != self.identity:
            return False
        freed = replace(current, holder="", duration_s=1, renew_time=now)
        try:
            self._write(obj, freed)
        except ApiError:
            return False
        self.holder = ""
        return True

    @property
    def _key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def _write(self, obj: JSON | None, record: LeaseRecord) -> None:
        if obj is None:
            body: JSON = {
                "apiVersion": names.LEASE.api_version,
                "kind": names.LEASE.kind,
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": record.spec_json(),
            }
            self.cluster.create(names.LEASE, body, self.namespace)
            return
        # A full update carrying the resourceVersion we read: if anyone wrote in between,
        # the API server answers 409 instead of letting two candidates both win.
        new = dict(obj)
        new["spec"] = {**(obj.get("spec") or {}), **record.spec_json()}
        self.cluster.update(names.LEASE, new)

    def _failed(self, now: float, was: bool, message: str) -> LeaderState:
        self._leading = self.leading(now)
        return self._state(now, was, "error", message)

    def _state(
        self, now: float, was: bool, action: Action | Literal["error"], msg: str
    ) -> LeaderState:
        leading = self.leading(now)
        return LeaderState(
            time=now,
            leading=leading,
            holder=self.identity if leading else self.holder,
            action=action,
            message=msg,
            became_leader=leading and not was,
            lost_leadership=was and not leading,
        )
