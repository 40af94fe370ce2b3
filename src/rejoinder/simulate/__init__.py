"""``rejoinder simulate``: scripted conversations on virtual time, with checks.

``load_scenario(path)`` reads a scenario YAML (``loading.py``; the schema is
``scenario.py``), ``simulate(scenario)`` runs it on a virtual-time loop with the test
kit's scripted models (``runner.py``, ``agents.py``, ``clock.py``),
``check_all(simulation)`` checks its ``expect:`` (``checks.py``), and ``cli.main`` is
the command. Examples: ``examples/scenarios/``.
"""

from .checks import Verdict, check_all
from .loading import load_scenario, parse_scenario
from .runner import Row, Simulation, simulate
from .scenario import Scenario, ScenarioError

__all__ = [
    "Row",
    "Scenario",
    "ScenarioError",
    "Simulation",
    "Verdict",
    "check_all",
    "load_scenario",
    "parse_scenario",
    "simulate",
]
