"""The agents of parked_speculation_before_task.yaml: a front agent whose tool awaits a
task that asks for the user's name (as in README "Handoffs and tasks")."""

from __future__ import annotations

import rejoinder as rj


class GetName(rj.AgentTask[str]):
    instructions = "Ask for the user's name."

    def __init__(self) -> None:
        super().__init__(id="get_name")

    async def on_enter(self) -> None:
        self.session.say("What is your name?")

    @rj.function_tool
    async def record_name(self, name: str) -> None:
        """Record the user's name.

        Args:
            name: the user's name
        """
        self.complete(name)


class Front(rj.Agent):
    instructions = "You are a front desk. Ask for the name when the user wants it."

    def __init__(self) -> None:
        super().__init__(id="front")

    @rj.function_tool
    async def ask_name(self) -> str:
        """Ask the user's name."""
        name = await GetName()
        return f"the user's name is {name}"
