"""Jobs in worker processes that speak JSON lines on stdin/stdout.

Layers, lowest first: `child` (how to start an mmforge child process, used by anything
that needs one), `protocol` (the commands and events on the wire), then `server` (the
worker side, which runs the pipelines) and `client` (the side that starts a worker and
reads its events). Nothing below imports anything above it.
"""
