"""The scale tests (``make test-scale``): a Ray cluster of two nodes on 127.0.0.1, the
offline voice demo on Ray Serve, real protocol clients. Slow (about two minutes) and
heavy (Ray, a speech stack per replica), so the normal ``make test`` run skips this
directory: it is collected only with ``REJOINDER_SCALE=1``, which ``make test-scale``
sets (it also runs them in a network namespace with only loopback up, since Ray binds
every interface and probes outside addresses)."""

from __future__ import annotations

import os

if os.environ.get("REJOINDER_SCALE") != "1":
    collect_ignore_glob = ["test_*.py"]
