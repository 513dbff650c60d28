"""The simulator benchmark runs end to end (tiny) and reports its figures."""

from loadgen.bench import sim_bench as bench


def test_bench_smoke(live, capsys):
    assert bench.main(["--mode", "spec", "--streams", "10", "--duration", "0.5", "--warmup", "0", "--time-scale", "1",
                       "--server-cpu", "-1", "--client-cpu", "-1"]) == 0
    out = capsys.readouterr().out
    assert "tokens/s" in out and "chunks/s" in out and "spec:" in out
