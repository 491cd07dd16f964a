"""The pods' ServiceProfileDescriptors as the agent reads them: each re-read every
config_ttl_s, one that breaks its schema reported (once per version) as skipped and read
as unreadable: its pods are sized on the default indicator targets and kept out of
reclaim."""

from __future__ import annotations

import math
from collections.abc import Mapping

from pykatalyst.agent.pods import PodSpec
from pykatalyst.agent.rama import spd_targets
from pykatalyst.api import config_fields, names
from pykatalyst.api import spd as spd_api
from pykatalyst.cluster.protocol import JSON, ApiError, Cluster
from pykatalyst.cluster.skips import Skip, SkippedObjects, skip_reason

# The cache's mark of an SPD that breaks its schema.
_UNREADABLE: JSON = {}


class SpdReader:
    """Reads the pods' SPDs through a cache kept for `ttl_s`."""

    def __init__(self, cluster: Cluster, skips: SkippedObjects, ttl_s: float) -> None:
        self.cluster = cluster
        self.skips = skips
        self.ttl_s = ttl_s
        self._cache: dict[tuple[str, str], tuple[float, JSON | None]] = {}

    def targets(self, s: PodSpec, now: float) -> dict[str, float]:
        """The indicator targets of the pod's SPD (none when it has none or it is unreadable)."""
        raw = self._object(s, now)
        return spd_targets(raw) if raw is not None and raw is not _UNREADABLE else {}

    def reclaim_off(self, now: float, valid: Mapping[str, PodSpec]) -> dict[str, str]:
        """The pods that lend nothing to reclaimed pods under their SPD (Katalyst's
        PodEnableReclaim: a Poor business level, or a baseline pod), with the rule."""
        out: dict[str, str] = {}
        for s in valid.values():
            if not s.spd_name or s.level == names.QOS_RECLAIMED_CORES:
                continue
            raw = self._object(s, now)
            if raw is _UNREADABLE:
                out[s.uid] = f"SPD {s.namespace}/{s.spd_name} is invalid: reclaim is off"
            elif raw is not None:
                created = s.created_key[0]
                meta = spd_api.PodMeta(created if math.isfinite(created) else 0.0, s.name)
                rule = spd_api.reclaim_rule(meta, raw)
                if rule:
                    out[s.uid] = rule
        return out

    def _object(self, s: PodSpec, now: float) -> JSON | None:
        """The pod's SPD, re-read every ttl_s: None when there is none, `_UNREADABLE` when
        it breaks its schema (reported once per version as skipped)."""
        key = (s.namespace, s.spd_name)
        hit = self._cache.get(key)
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        kind = names.SERVICE_PROFILE_DESCRIPTOR
        try:
            raw: JSON | None = self.cluster.get(kind, s.spd_name, s.namespace)
        except ApiError:
            raw = None
        if raw is not None:
            body = {**raw, "apiVersion": kind.api_version, "kind": kind.kind}
            problems = config_fields.config_problems(body)
            if problems:
                message = (
                    f"{kind.kind} {s.namespace}/{s.spd_name} is invalid: "
                    f"{'; '.join(str(p) for p in problems)} (the agent sizes the pool of "
                    f"{s.key} on its default indicator targets and keeps it out of reclaim)"
                )
                skip = Skip.of(kind, raw, skip_reason(raw), message)
                self.skips.report([skip], now)
                raw = _UNREADABLE
        self._cache[key] = (now, raw)
        return raw
