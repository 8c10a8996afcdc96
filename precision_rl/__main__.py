"""``python -m precision_rl``: the suite's command line."""

from precision_rl.cli import main

raise SystemExit(main())
