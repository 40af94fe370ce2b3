"""Agents and agent switches: which agent is current and how the floor passes between them.

- ``agent.py``: ``Agent``, its instructions, tools and hooks;
- ``agent_stack.py``: *where an agent switch is decided*: handoffs, ``update_agent``,
  tasks that pause their caller, and the order of ``on_exit`` / ``on_enter``;
- ``activity.py``: one running agent: its scope, its replies and their tool steps;
- ``agent_task.py``, ``task_conversation.py``: ``AgentTask`` (an agent that runs until it
  has a result) and the order its exchange joins the caller's context in;
- ``agent_record.py``: what an agent's side of the conversation records.
"""
