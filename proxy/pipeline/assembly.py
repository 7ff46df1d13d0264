"""What sits between the transports and the providers, assembled in one visible place.

`assemble` returns the policies in the order the pipeline runs them, the proxy's own tools and
the size governor's engine (for the HTTP endpoint's governor routes). Every feature that hooks
into a tools/call (the size governor, budgets, the loop guard, the ledger, metrics) is added
here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from frugal_proxy.config import GovernorSettings
from frugal_proxy.governor.engine import Governor
from frugal_proxy.policies import Policy
from frugal_proxy.policies.governor import GovernorPolicy
from frugal_proxy.policies.metrics import CallMetrics, CallSink
from frugal_proxy.providers.governor_tools import governor_tools
from frugal_proxy.providers.own_tools import OwnTool


@dataclass
class Assembly:
    policies: list[Policy] = field(default_factory=list)
    own_tools: list[OwnTool] = field(default_factory=list)
    governor: Governor | None = None


def assemble(governor: GovernorSettings | None = None, metrics: CallSink | None = None) -> Assembly:
    """The embedded default: the size governor (on unless `enabled = false`) with its in-memory
    spill store and its own tools, then the call metrics when there is somewhere to put them
    (the HTTP endpoint's `/metrics`), last so that they see what every other policy decided.
    build_pipeline adds the call log after these policies."""
    settings = governor or GovernorSettings()
    assembly = Assembly()
    if settings.enabled:
        engine = Governor.embedded(settings)  # each operator may lower its own budgets
        assembly.governor = engine
        assembly.policies.append(GovernorPolicy(engine))
        assembly.own_tools.extend(governor_tools(engine))
    if metrics is not None:
        assembly.policies.append(CallMetrics(metrics))
    return assembly
