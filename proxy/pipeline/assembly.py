"""What sits between the transports and the providers, assembled in one visible place.

`assemble` returns the policies in the order the pipeline runs them and the proxy's own tools.
Every feature that hooks into a tools/call (the size governor, budgets, the loop guard, the
ledger) is added here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from frugal_proxy.governor.operator_budgets import OperatorGovernor
from frugal_proxy.policies import Policy
from frugal_proxy.policies.governor import GovernorSettings
from frugal_proxy.providers.governor_tools import governor_tools
from frugal_proxy.providers.own_tools import OwnTool

if TYPE_CHECKING:
    from frugal_proxy.server.metrics import Metrics


@dataclass
class Assembly:
    policies: list[Policy] = field(default_factory=list)
    own_tools: list[OwnTool] = field(default_factory=list)


def assemble(governor: GovernorSettings | None = None) -> Assembly:
    """The embedded default: the size governor (on unless `enabled = false`) with its in-memory
    spill store and its own tools; build_pipeline adds the call log after these policies."""
    settings = governor or GovernorSettings()
    assembly = Assembly()
    if settings.enabled:
        policy = OperatorGovernor.embedded(settings)  # each operator may lower its own budgets
        assembly.policies.append(policy)
        assembly.own_tools.extend(governor_tools(policy))
    return assembly


def with_metrics(assembly: Assembly | None, metrics: Metrics) -> Assembly:
    """The assembly plus the call metrics policy, last so that it sees what every other policy
    decided (the HTTP endpoint adds it for `/metrics`; stdio has no use for it)."""
    from frugal_proxy.policies.metrics import CallMetrics  # prometheus_client: only for --http

    base = assembly or assemble()
    return Assembly([*base.policies, CallMetrics(metrics)], list(base.own_tools))
