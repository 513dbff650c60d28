"""Workloads: the first step of the pipeline.

In: a workload spec (a built-in name, a plugin, a JSONL/ShareGPT file, a weighted mix)
and the length settings. Out: an endless, seeded stream of :class:`loadgen.request.GenRequest`,
identical for every target of a run.

- ``base``: the :class:`Workload` interface, drafts and the seeded helpers built-ins share;
- ``lengths``/``tokenizers``: length control that never invents tokens, and the counters it uses;
- ``registry``: a spec to a workload (built-ins, entry points, files, mixes);
- ``files``: user JSONL and ShareGPT files; ``builtin/``: the four built-ins and their data.
"""
