"""Engine children: one process per served model, its state machine, and the pool that spawns and evicts them."""

from blazar.supervisor.child import Child, State
from blazar.supervisor.pool import Supervisor

__all__ = ["Child", "State", "Supervisor"]
