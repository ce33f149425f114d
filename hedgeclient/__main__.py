"""``python -m hedgeclient``: the same as the ``hedgeclient`` command."""

from hedgeclient._cli import main

raise SystemExit(main())
