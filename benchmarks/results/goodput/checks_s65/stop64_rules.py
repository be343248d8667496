"""Stop 64's rules, to patch into A/B cells (`ab_corrections.py`, `batch_ab_s64.py`): a verify width reads and teaches
the correction of its nearest grid point alone, and a chain position verified for the first time enters at the prior.
`patches()` gives the context managers that put them in place."""
import math
from bisect import bisect_right
from unittest import mock

from specdec import acceptance, costs


def nearest(grid, value):
    index = bisect_right(grid, value)
    if index == 0:
        return 0
    if index >= len(grid) or value - grid[index - 1] <= grid[index] - value:
        return index - 1
    return index


def old_sources(grid, learnt, extra):
    point = nearest(grid, extra)
    if point in learnt:
        return point, point, 0.0
    below = max((p for p in range(point) if p in learnt), default=-1)
    above = min((p for p in range(point + 1, len(grid)) if p in learnt), default=-1)
    if below < 0 or above < 0:
        return (above, above, 0.0) if below < 0 else (below, below, 0.0)
    return below, above, (extra - grid[below]) / (grid[above] - grid[below])


def old_correction(self, packed, curve, extra, band):
    if not self.corrections:
        return 1.0
    known = self.corrections.get((packed, curve.batch, nearest(curve.extras, extra), band))
    if known is not None:
        return known
    learnt = self._learnt(packed, curve, band)
    return costs._blend(learnt, old_sources(curve.extras, learnt, extra))


def old_observe_verify(self, batch, inputs, packed, seconds, context=None):
    table = self.live
    packed = packed or batch <= 1
    scale = table.scale.get(packed, 1.0)
    predicted = table.verify_from(batch, inputs, 1, packed, context)[0]
    if predicted <= 0 or seconds <= 0:
        return
    ratio = min(1.4, max(0.7, seconds / predicted))
    table.scale[packed] = math.exp(math.log(scale) + 0.05 * math.log(ratio))
    low, high = costs._buckets(batch)
    share = 0.0 if low == high else (batch - low) / (high - low)
    for bucket, part in ((low, 1.0 - share), (high, share)):
        curve = table.curves.get((packed, bucket))
        if curve is None or part <= 0:
            continue
        key = (packed, bucket, nearest(curve.extras, max(0.0, inputs - batch)), costs.context_band(context))
        old = table.corrections.get(key)
        if old is None:
            old = table.correction(packed, curve, curve.extras[key[2]], key[3])
        table.corrections[key] = min(4.0, max(0.25, math.exp(math.log(old) + 0.25 * part * math.log(ratio))))
        table.corrected(key)


new_observe = acceptance.RowAcceptance.observe


def old_observe(self, parents, accepted, *args, **kwargs):
    """Stop 64's entry of a new position: the prior's pseudo-counts (`_start`), then the verdict as now."""
    while len(self.trials) < len(accepted):
        self.hits.append(self.weight * self._start(len(self.trials)))
        self.trials.append(self.weight)
    new_observe(self, parents, accepted, *args, **kwargs)


def patches(with_acceptance: bool = True) -> list:
    """The patches of stop 64's cost-curve rule and, with `with_acceptance`, its entry of new positions."""
    old = [(costs, "correction_sources", old_sources), (costs.CostTable, "correction", old_correction),
           (costs.CostModel, "observe_verify", old_observe_verify)]
    if with_acceptance:
        old.append((acceptance.RowAcceptance, "observe", old_observe))
    return [mock.patch.object(owner, name, value) for owner, name, value in old]
