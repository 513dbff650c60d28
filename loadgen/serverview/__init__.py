"""The server's own view of a stage: its Prometheus ``/metrics`` read at the window's edges and in between.

In: a target's base URL (and, at the window's close, what the client counted between the same two
instants). Out: the stage's ``server`` block, a JSON-able dict documented in docs/metrics.md
("The server's view"): counter deltas, gauge summaries, the server's latency histograms over the
window, acceptance per position, and cross-checks of the client's figures against the server's.

- which metric names mean what for each engine, when its counters move and how its prefix cache is
  emptied are the engine's own module's (``loadgen.engines``); nothing here names an engine.
- ``page``: one scrape: fetch ``/metrics`` (bounded in time and size), parse it with
  ``prometheus_client``'s parser into a :class:`~loadgen.serverview.page.Snapshot`.
- ``summary``: two edge snapshots and the samples between them → the ``server`` block.
- ``checks``: client against server: tokens, acceptance, running batch against C.
- ``watch``: :class:`~loadgen.serverview.watch.ServerWatch`, what a stage (or the Locust master)
  holds: ``open()``, a sampling thread, ``close()`` → the block.
- ``reset``: empty a server's prefix cache before a stage.

Nothing here raises for what a server does: a page that is missing, slow, huge or not Prometheus
text, a counter that is absent or goes backwards, each becomes a line in the block's ``notes``.
"""
