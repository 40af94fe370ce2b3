"""Tools: what the model may call and how a call runs.

- ``function_tool.py``: ``@function_tool``, a JSON schema from type hints and docstrings;
- ``runner.py``: *where a tool call is run*: one task and one ``tool`` obligation per
  call, its output recorded, background tools released;
- ``run_context.py``: ``RunContext``, what a running tool may use.
"""
