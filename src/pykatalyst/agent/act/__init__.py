"""The agent's acting side: applies an `AgentPlan` and nothing else.

`Performer.perform(inputs, plan, state)` performs the eviction stages' decisions
(evictions, taints, Events: each stage's `act`), the egress shape when it changed, the
knobs (`KnobWriter`, through the enforcer), the CNR status and overcommit advice
(`agent/reporter.py`), the Events, and the cpu placement's checkpoint; it returns what it
did as a `Performed`. It decides nothing: every value it writes is in the plan.
"""

from pykatalyst.agent.act.knobs import KnobEnforcer, KnobWriter, WriteOutcome
from pykatalyst.agent.act.performer import Performed, Performer

__all__ = ["KnobEnforcer", "KnobWriter", "Performed", "Performer", "WriteOutcome"]
