"""Tools: what the model may call and how a call runs.

- ``function_tool.py``: ``@function_tool``, a JSON schema from type hints and docstrings;
- ``invocation.py``: *where a tool call is decided*, for every path alike (a pipeline
  reply, a realtime provider, a delegated answer): the tools an agent is offered, the
  ``RunContext`` the tool sees, and what its value means (an answer, a handoff, an error
  the model is told);
- ``runner.py``: the pipeline's calls: one task and one ``tool`` obligation per call, and
  the release of a tool to the background;
- ``run_context.py``: ``RunContext``, what a running tool may use.
"""
