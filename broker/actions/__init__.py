"""Actions: triggers (``On``), gates (``If``) and steps (``Do``) run by the broker (``<Actions>``).

The object interface plugins implement is :mod:`broker.actions.interface`; the runtime that starts triggers
and runs actions is :mod:`broker.actions.runtime`.
"""

from broker.actions.interface import (
    ActionError,
    ActionHost,
    AdminRequest,
    Fire,
    Gate,
    RunContext,
    RunResult,
    Step,
    StepResult,
    Trigger,
)

__all__ = [
    "ActionError",
    "ActionHost",
    "AdminRequest",
    "Fire",
    "Gate",
    "RunContext",
    "RunResult",
    "Step",
    "StepResult",
    "Trigger",
]
