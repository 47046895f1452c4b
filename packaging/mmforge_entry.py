"""The frozen app's entry point: the same `main` as the `mmforge` script."""

from mmforge.app.cli import main

raise SystemExit(main())
