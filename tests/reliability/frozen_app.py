"""The test app (``tests/support/procapp.py``) with ``broker_transport_options`` added from
``BROKER_OPTIONS`` (JSON), for ``test_frozen_servers.py``: a frozen broker must fail a round
within the bound the user set, and a bound of a second keeps the test short."""

from __future__ import annotations

import json
import os

from tests.support.procapp import app

if os.environ.get("BROKER_OPTIONS"):
    app.conf.broker_transport_options = {
        **(app.conf.broker_transport_options or {}),
        **json.loads(os.environ["BROKER_OPTIONS"]),
    }

__all__ = ["app"]
