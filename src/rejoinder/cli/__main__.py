"""``python -m rejoinder.cli``: the ``rejoinder`` command."""

from . import main

raise SystemExit(main())
