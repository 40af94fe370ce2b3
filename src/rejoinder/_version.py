"""The version of rejoinder, from the installed package's metadata.

``pyproject.toml``'s ``version`` is the one place it is written: installing the package
(``pip install``, ``pip install -e .``) records it in the metadata, which is read here.
``rejoinder.__version__`` loads this module on first use (``importlib.metadata`` takes
tens of milliseconds to import, which ``import rejoinder`` does not pay).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["UNKNOWN", "__version__", "installed_version"]

DISTRIBUTION = "rejoinder"
UNKNOWN = "0+unknown"
"""The version of a source tree that was never installed (``PYTHONPATH=src``)."""


def installed_version() -> str:
    """The installed distribution's version, or ``UNKNOWN``."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return UNKNOWN


__version__ = installed_version()
