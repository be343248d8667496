"""ab_kept.py with `+controller._AB_NO_BANDS=1`: rows start from all rows' pooled estimate (before stop 63)."""
import runpy
import sys

from specdec import controller as C

C._AB_NO_BANDS = 0
orig = C.GoodputController._band_prior
def band_prior(self, name, band):
    return self.pooled[name].fork(C.PRIOR_WEIGHT, C.DECAY) if C._AB_NO_BANDS else orig(self, name, band)
C.GoodputController._band_prior = band_prior
sys.argv = ["ab_kept.py"] + sys.argv[1:]
runpy.run_path("benchmarks/results/goodput/checks_s60/ab_kept.py", run_name="__main__")
