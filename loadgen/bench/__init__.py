"""Benchmarks of loadgen itself: figures printed, never timed unit tests.

In: a benchmark's options (``loadgen bench client|sim|crossover``). Out: tables of figures:
the client's error against a server's own send log (``client_bench``, ``sendlog``,
``schedserver``), the crossover found live against the simulator's truth (``crossover_bench``), the
simulator's own speed (``sim_bench``). Each bench parses its own options: nothing below the fronts reads
argparse.
"""
