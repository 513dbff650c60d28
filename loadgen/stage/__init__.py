"""A stage's records become its result.

In: the :class:`loadgen.record.RequestRecord` of one stage, the window instants and the
client's own health readings. Out: a :class:`StageResult` — one HDR histogram per metric
(``loadgen.metrics``), the per-second timeline, counts, SLO attainment and the client
self-check — ready to be written, merged across processes and compared.

- ``result``: the accumulator and the result types; ``timeline``: per-second bins;
- ``selfcheck``: whether the client kept up (event-loop lag, CPU, stamp gaps);
- ``switching``: whether speculation was on or off through the window, from the stream's chunks, and whether a
  configuration that switches it thrashed;
- ``load``: where a stage sits on its ladder, said as what it is (a concurrency, a rate, a trace's speed).
"""
