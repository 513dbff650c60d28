"""Standalone entry point: python bench/bench_client.py [options] (same as `loadgen bench client`)."""

from loadgen.bench.client_bench import main

raise SystemExit(main())
