"""`python -m mmforge.app` runs the same entry point as the `mmforge` script."""

from mmforge.app.cli import main

raise SystemExit(main())
