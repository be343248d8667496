"""How far a cell doing plain decoding's work reads from `none` in the Xeon sweeps of stops 58-67: there `ppd` decoded
plainly (no-draft share 99.8-100%: at most a few probes in a sweep), so `ppd` over `none` is an A/A comparison plus the controller's
quiet-step host work (~0.5-1% under the profiler at stop 68). Ratios as `benchmarks/goodput_targets.py` computes
them (the harness's mean per-sample tokens/s over `none`'s, wall clock and process CPU time).

    .venv/bin/python benchmarks/results/goodput/checks_s68/aa_past_sweeps.py
"""
from pathlib import Path

from specdec.benchmarks.goodput_targets import CATEGORIES, no_draft_shares, sample_ratios

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = {"spec_bench_b6770ba": 58, "spec_bench_5e4eff5": 60, "spec_bench_1ced711": 61, "spec_bench_7cbc223": 62,
          "spec_bench_8988e9a": 64, "spec_bench_b62d4c3": 65, "spec_bench_f2f5d98": 66, "spec_bench_8449d80": 67}

for clock in ("wall_times", "cpu_times"):
    print(f"## ppd (plain on every row-step) over none, {clock}\n")
    print("| stop | " + " | ".join(CATEGORIES) + " | lowest | < 0.97 somewhere | overall >= 1.0 | no-draft share |")
    print("|---|" + "---|" * (len(CATEGORIES) + 4))
    misses = below_one = 0
    values = []
    for folder, stop in SWEEPS.items():
        path = ROOT / folder
        share = no_draft_shares(path)["ppd"]
        if share < 0.997:
            raise SystemExit(f"{folder}: ppd drafted on {1 - share:.1%} of row-steps; not an A/A comparison")
        ratio = sample_ratios(path, clock, best=False)["ppd"]
        low = min(ratio.values())
        misses += low < 0.97
        below_one += ratio["overall"] < 1.0
        values += [ratio[c] for c in CATEGORIES[:-1]]
        print(f"| {stop} | " + " | ".join(f"{ratio[c]:.3f}" for c in CATEGORIES)
              + f" | {low:.3f} | {'yes' if low < 0.97 else 'no'} | {'yes' if ratio['overall'] >= 1.0 else 'no'}"
              f" | {share:.2%} |")
    mean = sum(values) / len(values)
    spread = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    print(f"\n{misses} of {len(SWEEPS)} sweeps read below 0.97 in some category; {below_one} below 1.0 overall. "
          f"Per category: mean {mean:.3f}, standard deviation {spread:.3f} over {len(values)} cells.\n")
