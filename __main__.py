"""``python -m sim2real`` entry point."""

from sim2real.cli import main

raise SystemExit(main())
