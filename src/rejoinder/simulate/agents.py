"""The scenario's agents and tools: scripted ones, or the user's own classes by path.

A ``module:`` agent file is loaded the way ``rejoinder dev`` loads an agent file
(``rejoinder.discover``): on its own, with its folder on ``sys.path``, and a failure
becomes a message that says what to fix. A scripted tool takes whatever arguments the
model gives it, works for ``duration`` seconds (in the background after its first
``ctx.update`` when ``background``), and returns its ``result``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from ..discover import EntrypointError, _run_file, module_name_for
from ..models import ToolError
from ..models.tools import ToolDefinition, ToolResult
from ..session import Agent, FunctionTool, RunContext
from ..session.tools.function_tool import arguments_object
from ..testing import Delay, Fail, ToolCall
from .scenario import AgentSpec, Scenario, ScenarioError, Step, ToolSpec

__all__ = ["AgentFactory", "ScriptedTool", "script_of", "scripted_tool"]


class AgentFactory:
    """Makes the scenario's agents: scripted ones, or the user's classes by file path."""

    def __init__(self, scenario: Scenario, base_dir: Path) -> None:
        self.scenario = scenario
        self.base_dir = base_dir
        self.tools = {spec.name: scripted_tool(spec, self) for spec in scenario.tools}
        self._modules: dict[Path, object] = {}

    def check(self) -> None:
        """Load every module and find every class now, before anything runs."""
        for spec in [self.scenario.agent, *self.scenario.agents.values()]:
            if spec.module is not None:
                self._class(spec)
        for event in self.scenario.events:
            if event.handoff is not None:
                self._spec_for(event.handoff)

    @property
    def session_tools(self) -> list[FunctionTool]:
        """A user's agent keeps its own tools; the scenario's are offered beside them."""
        return list(self.tools.values()) if self.scenario.agent.module is not None else []

    def main(self) -> Agent:
        return self.build(self.scenario.agent, "assistant")

    def named(self, name: str) -> Agent:
        return self.build(self._spec_for(name), name)

    def build(self, spec: AgentSpec, default_id: str) -> Agent:
        if spec.scripted is not None:
            names = spec.scripted.tools if spec.scripted.tools is not None else list(self.tools)
            return Agent(
                instructions=spec.scripted.instructions,
                id=spec.scripted.id or default_id,
                tools=[self.tools[n] for n in names],
            )
        cls = self._class(spec)
        try:
            agent = cls(**spec.args)
        except Exception as exc:
            raise ScenarioError(
                f"creating {spec.class_}({_args(spec.args)}) from {spec.module} failed: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        if not isinstance(agent, Agent):
            raise ScenarioError(f"{spec.class_}() in {spec.module} did not make an rj.Agent")
        return agent

    def _spec_for(self, name: str) -> AgentSpec:
        spec = self.scenario.agents.get(name)
        if spec is not None:
            return spec
        main = self.scenario.agent
        if main.module is None:
            raise ScenarioError(f"no agent named {name!r} in `agents:`")
        return AgentSpec.model_validate({"module": main.module, "class": name})

    def _class(self, spec: AgentSpec) -> type[Agent]:
        assert spec.module is not None and spec.class_ is not None
        module = self._module(spec.module)
        cls = getattr(module, spec.class_, None)
        if cls is None:
            found = sorted(
                n
                for n, v in vars(module).items()
                if isinstance(v, type) and issubclass(v, Agent) and v.__module__ == module.__name__
            )
            raise ScenarioError(
                f"{spec.module} defines no class {spec.class_!r}"
                + (f"; its agent classes: {', '.join(found)}" if found else "")
            )
        if not (isinstance(cls, type) and issubclass(cls, Agent)):
            raise ScenarioError(f"{spec.class_} in {spec.module} is not an rj.Agent subclass")
        return cls

    def _module(self, path: str) -> Any:
        file = (self.base_dir / path).resolve()
        if file in self._modules:
            return self._modules[file]
        if not file.is_file() or file.suffix != ".py":
            raise ScenarioError(f"agent module not found (or not a .py file): {file}")
        try:
            module = _run_file(file, module_name_for(file), None)
        except EntrypointError as exc:
            raise ScenarioError(str(exc)) from None
        self._modules[file] = module
        return module


class _Args(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


_CTX = "_rejoinder_run_context"


class ScriptedTool(FunctionTool):
    """A tool from ``tools:``: it takes any arguments the model gives it."""

    def parse_arguments(self, raw: str) -> dict[str, Any]:
        return arguments_object(self.name, raw)


def scripted_tool(spec: ToolSpec, agents: AgentFactory) -> ScriptedTool:
    import pydantic

    async def run(**kwargs: Any) -> Any:
        ctx: RunContext[Any] = kwargs.pop(_CTX)
        if spec.background:
            await ctx.update(spec.update)
        if spec.duration:
            await asyncio.sleep(spec.duration)
        if spec.error is not None:
            raise ToolError(spec.error)
        if spec.handoff is not None:
            return agents.named(spec.handoff)
        text = spec.result.format_map(_Args(kwargs))
        return text if spec.reply_required else ToolResult(text, reply_required=False)

    run.__name__ = spec.name
    properties = {p: {"type": "string", "description": d} for p, d in spec.parameters.items()}
    definition = ToolDefinition(
        name=spec.name,
        description=spec.description,
        parameters={"type": "object", "properties": properties},
    )
    return ScriptedTool(
        run,
        definition=definition,
        args_model=pydantic.create_model(f"{spec.name}_args"),
        context_param=_CTX,
    )


def script_of(turns: list[list[Step]]) -> list[list[Any]]:
    """The scenario's ``llm:`` as ``ScriptedLLM`` responses."""
    out: list[list[Any]] = []
    for turn in turns:
        steps: list[Any] = []
        for step in turn:
            if step.text is not None:
                steps.append(step.text)
            elif step.tool is not None:
                steps.append(ToolCall(step.tool, dict(step.args)))
            elif step.delay is not None:
                steps.append(Delay(step.delay))
            elif step.fail is not None:
                steps.append(Fail(step.fail))
        out.append(steps)
    return out


def _args(args: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in args.items())
