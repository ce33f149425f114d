"""``python -m hedgeclient``: the same as the ``hedgeclient`` command (:mod:`hedgeclient.cli`)."""

from hedgeclient.cli import main

raise SystemExit(main())
