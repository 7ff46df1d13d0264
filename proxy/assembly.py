"""What sits between the transports and the providers, assembled in one visible place.

`assemble` returns the policies in the order the pipeline runs them and the proxy's own tools.
Every feature that hooks into a tools/call (the size governor, budgets, the loop guard, the
ledger) is added here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from frugal_proxy.own_tools import OwnTool
from frugal_proxy.policies import Policy


@dataclass
class Assembly:
    policies: list[Policy] = field(default_factory=list)
    own_tools: list[OwnTool] = field(default_factory=list)


def assemble() -> Assembly:
    """The embedded default: no policies beyond the call log that build_pipeline adds."""
    return Assembly()
