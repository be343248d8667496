"""The benchmark harness (installed as specdec.benchmarks): Spec-Bench-format sweeps, reports, plots."""
