"""``python -m hedgeclient.cli``: the same as the ``hedgeclient`` command."""

from hedgeclient.cli import main

raise SystemExit(main())
