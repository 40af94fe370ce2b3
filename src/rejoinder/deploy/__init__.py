"""Deploying an agent file beyond one process.

- ``rejoinder.deploy.ray``: a Ray Serve application (``rejoinder serve --ray FILE``): one
  deployment whose replicas each hold many sessions, autoscaled on live sessions. Needs
  the ``ray`` extra (``pip install 'rejoinder[ray]'``); ``import rejoinder.deploy`` does
  not import Ray.

Without an engine, run several ``rejoinder serve --max-sessions N`` processes behind a
TCP/WebSocket load balancer (``docs/scaling.md``).
"""

from __future__ import annotations

__all__: list[str] = []
