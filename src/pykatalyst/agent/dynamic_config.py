"""The agent's settings in force: its file's, overlaid with the node's AdminQoSConfiguration.

`AgentSettings.update(read, warnings, events)` takes one `ConfigRead` from the node-state
holder and returns the effective `AgentConfig`. An invalid object keeps the configuration
in force and says which field is wrong and what is accepted (a warning, an Event, and the
plan's `config`); fields pykatalyst does not implement are listed once per version of the
object (a log line and an Event), never fatal.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.node_watch import ConfigRead
from pykatalyst.agent.plan import PlanEvent
from pykatalyst.api import config_fields, names
from pykatalyst.api.crds import AdminQoSConfiguration
from pykatalyst.cluster.protocol import JSON

_log = logging.getLogger("pykatalyst.agent")

AGENT_CONFIG = {"source": None, "state": "agent config"}


class AgentSettings:
    def __init__(self, node: str, base: AgentConfig) -> None:
        self.node = node
        self.base = base
        self.config = base
        self.status: dict[str, Any] = dict(AGENT_CONFIG)
        self._read: ConfigRead | None = None
        self._events_sent: set[tuple[str, str, str]] = set()

    def update(self, read: ConfigRead, warnings: list[str], events: list[PlanEvent]) -> AgentConfig:
        """The configuration in force after `read` (applied once per read)."""
        if read is self._read:
            if self.status["state"] == "invalid":
                warnings.append(self.status["warning"])
            return self.config
        self._read = read
        warnings.extend(read.warnings)
        if read.ref is None:
            self.config = self.base
            self.status = dict(AGENT_CONFIG)
        elif read.raw is None:
            warnings.append(
                f"dynamic config {read.ref}: {read.error} (keeping the current configuration)"
            )
        else:
            self._apply(read.ref, read.raw, warnings, events)
        return self.config

    def _apply(self, ref: str, raw: JSON, warnings: list[str], events: list[PlanEvent]) -> None:
        version = str((raw.get("metadata") or {}).get("resourceVersion", ""))
        status: dict[str, Any] = {"source": ref, "resourceVersion": version}
        try:
            cfg = self.base.with_admin_qos(AdminQoSConfiguration.from_json(raw))
        except ValueError as exc:  # pydantic's ValidationError included
            problems = (
                "; ".join(str(p) for p in config_fields.problems_of(exc))
                if isinstance(exc, ValidationError)
                else str(exc)
            )
            warning = f"dynamic config {ref} is invalid: {problems} (keeping the current one)"
            self.status = {**status, "state": "invalid", "error": problems, "warning": warning}
            warnings.append(warning)
            self._event(events, raw, "InvalidConfig", f"{warning}.", version)
            return
        self.config = cfg
        ignored = [u.path for u in config_fields.not_taking_effect(raw)]
        if self.status.get("source") != ref:
            # Coming back to a config told about before is news again.
            applied = names.EVENT_REASON_CONFIG_APPLIED
            self._events_sent = {k for k in self._events_sent if k[1] != applied}
        self.status = {**status, "state": "in force", "not_implemented": ignored}
        in_force = f"{ref} (resourceVersion {version}) is in force on node {self.node}"
        self._event(events, raw, names.EVENT_REASON_CONFIG_APPLIED, in_force, version, "Normal")
        if ignored and self._event(
            events,
            raw,
            "FieldsNotImplemented",
            f"pykatalyst does not act on these fields of {ref}: {', '.join(ignored)}",
            version,
            "Normal",
        ):
            _log.info("dynamic config %s: not implemented, ignored: %s", ref, ", ".join(ignored))

    def _event(
        self,
        events: list[PlanEvent],
        raw: JSON,
        reason: str,
        message: str,
        version: str,
        type_: str = "Warning",
    ) -> bool:
        meta = raw.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        sent = (key, reason, version)
        if sent in self._events_sent:
            return False
        self._events_sent.add(sent)
        kind = names.ADMIN_QOS_CONFIGURATION
        events.append(
            PlanEvent(
                kind.kind,
                key,
                reason,
                message,
                type_,
                api_version=kind.api_version,
                uid=str(meta.get("uid", "")),
            )
        )
        return True
