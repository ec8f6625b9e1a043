"""``python -m corvid_actors``: the ``corvid-actors`` command line (:mod:`corvid_actors.daemon.cli`)."""

import sys

from corvid_actors.daemon.cli import main

sys.exit(main())
