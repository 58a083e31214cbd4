"""Timing statistics and rules that need no GPU: summaries, the stop rule, clocks, rotations."""

import math
import statistics
from collections import Counter

import pytest

from gemmlab.bench import timing
from gemmlab.bench.timing import TimingOptions, Timing, summarize


def test_summary_is_median_quartiles_and_extremes():
    t = summarize([5.0, 1.0, 3.0, 2.0, 4.0], "cold")
    assert (t.median_ms, t.min_ms, t.max_ms, t.q1_ms, t.q3_ms, t.samples) == (3.0, 1.0, 5.0, 2.0, 4.0, 5)
    assert t.l2 == "cold" and t.method == "events" and t.iqr_ms == 2.0
    assert t.rel_noise == pytest.approx(2.0 / 3.0)


def test_summary_of_few_samples_uses_the_extremes_as_quartiles():
    t = summarize([2.0, 1.0], "warm", method="graph", calls_per_sample=8)
    assert (t.q1_ms, t.q3_ms, t.median_ms, t.calls_per_sample) == (1.0, 2.0, 1.5, 8)
    with pytest.raises(ValueError):
        summarize([], "cold")


def test_an_outlier_moves_the_median_little():
    base = [1.0] * 50 + [1.01] * 50
    t = summarize(base + [100.0], "cold")
    assert t.median_ms == pytest.approx(1.01) and t.max_ms == 100.0


def test_relative_standard_error_of_the_median_shrinks_with_more_samples():
    few = [1.0, 1.02, 0.98, 1.01, 0.99]
    many = few * 20
    assert timing.median_rel_se(many) < timing.median_rel_se(few)
    # sigma from the IQR (1.349 sigma), times sqrt(pi/2) for the median, over sqrt(n)
    t = summarize(many, "")
    expected = 1.2533 * (t.iqr_ms / 1.349) / math.sqrt(len(many)) / t.median_ms
    assert timing.median_rel_se(many) == pytest.approx(expected)
    assert timing.median_rel_se([1.0]) == math.inf


@pytest.mark.parametrize("samples,spent,opts,stop", [
    ([1.0] * 3, 3.0, TimingOptions(min_samples=5), False),             # under the minimum
    ([1.0] * 5, 5.0, TimingOptions(min_samples=5), True),              # no noise at all
    ([1.0, 2.0] * 5, 15.0, TimingOptions(min_samples=5, budget_ms=100), False),  # noisy, budget left
    ([1.0, 2.0] * 5, 15.0, TimingOptions(min_samples=5, budget_ms=10), True),    # budget spent
    ([1.0, 2.0] * 5, 15.0, TimingOptions(min_samples=5, max_samples=10), True),  # cap reached
    ([1.0] * 40, 40.0, TimingOptions(fixed_samples=50), False),        # a fixed count ignores the noise
    ([1.0] * 50, 50.0, TimingOptions(fixed_samples=50), True),
])
def test_stop_rule(samples, spent, opts, stop):
    assert timing.enough(samples, spent, opts) is stop


def test_throttle_reasons_decode():
    assert timing.throttle_names(0) == [] and timing.throttle_names(None) == []
    assert timing.throttle_names(0x1 | 0x4) == ["idle", "software power cap"]
    assert timing.throttle_names(0x40 | 0x1000)[-1] == "other (0x1000)"


@pytest.mark.parametrize("now,top,dropped", [(1980, 1980, False), (1500, 1980, False), (1400, 1980, True),
                                             (None, 1980, False), (1000, None, False)])
def test_clock_drop_rule(now, top, dropped):
    assert timing.clock_dropped(now, top, 0.75) is dropped


def test_rotations_cover_twice_the_l2():
    l2 = 50 << 20
    assert timing.rotation_count(100 << 20, l2) == 1          # bigger than the L2: a flush suffices
    r = timing.rotation_count(1 << 20, l2)
    assert r * (1 << 20) > 2 * l2 and r <= 1024
    assert timing.rotation_count(1000, l2) == 1024           # capped
    assert timing.rotation_count(0, l2) == 1


def test_time_cpu_counts_samples_until_the_rule_stops():
    calls = []

    def fn():
        calls.append(1)
        sum(range(2000))

    t = timing.time_cpu(fn, TimingOptions(min_samples=4, max_samples=7, noise_target=0.0, budget_ms=1e9))
    assert t.samples == 7 and len(calls) == 8  # one warm-up call, then the samples
    assert t.method == "wall" and t.l2 == "warm" and t.min_ms <= t.median_ms <= t.max_ms


class _FakeSampler:
    """Stands in for a GPU sampler: `settles` turns until its stop rule is met, `cap` turns in all."""

    def __init__(self, name, log, settles, cap=100):
        self.name, self.log, self.settles, self.cap, self.turns = name, log, settles, cap, 0

    def turn(self):
        self.turns += 1
        self.log.append(self.name)

    def done(self):
        return self.turns >= self.settles

    def exhausted(self):
        return self.turns >= self.cap


def test_balanced_orders_put_every_call_after_every_other_equally_often():
    for n in range(1, 9):
        orders = timing.balanced_orders(n)
        assert len(orders) == (n if n % 2 == 0 or n == 1 else 2 * n)
        assert all(sorted(o) == list(range(n)) for o in orders)
        follows = Counter((o[i], o[i + 1]) for o in orders for i in range(n - 1))
        assert len(follows) == n * (n - 1) and len(set(follows.values())) <= 1, (n, follows)


def test_interleave_keeps_sampling_calls_that_settled_early_in_balanced_orders():
    log, progress = [], []
    samplers = {n: _FakeSampler(n, log, settles) for n, settles in (("a", 1), ("b", 6), ("c", 2))}
    rounds = timing.interleave(samplers, 4, on_round=progress.append)
    # "b" needs six turns: every call takes six, one per round, never two in a row out of turn
    assert rounds == 6 and [s.turns for s in samplers.values()] == [6, 6, 6]
    assert log == list("abc" "bca" "cab" "cba" "acb" "bac")  # three rotations, then their reverses
    # progress: exactly the least number of rounds per call, whatever the rounds that followed
    assert len(progress) == 4 * 3 and progress.count("a") == 4


def test_interleave_runs_the_least_rounds_and_stops_at_the_caps():
    log = []
    samplers = {"a": _FakeSampler("a", log, 0), "b": _FakeSampler("b", log, 0)}
    assert timing.interleave(samplers, 3) == 3 and log == list("abbaab")
    log.clear()
    capped = {"a": _FakeSampler("a", log, 10, cap=2), "b": _FakeSampler("b", log, 3)}
    # "a" may take only two samples' turns and never settles: the rounds end once "b" has settled
    assert timing.interleave(capped, 1) == 3 and log == list("abbab")


def test_timing_dict_round_trip():
    t = summarize([1.0, 2.0, 3.0, 4.0], "cold", discarded=2, sm_mhz_min=1755.0, sm_mhz_max=1980.0)
    assert Timing(**t.as_dict()) == t
    assert statistics.median([1.0, 2.0, 3.0, 4.0]) == t.median_ms


def test_gpu_timing_without_a_gpu_fails_in_one_line():
    from gemmlab.runtime import device
    from gemmlab.runtime.errors import GPUUnavailableError

    if device.gpu_available():
        pytest.skip("checks the no-GPU path")
    with pytest.raises(GPUUnavailableError, match="GPU unavailable"):
        timing.time_gpu(lambda: None)


def test_sustained_rounds_alternate_and_derive_cycles_and_energy():
    from gemmlab.bench.sustained import Turn, rounds

    order = []
    fake = {"cublas": (1.6, 1365.0, 699.0), "mine": (1.58, 1350.0, 698.0)}

    def take(name):
        order.append(name)
        ms, mhz, w = fake[name]
        return Turn(ms, mhz, w, 100, (0x4,))

    res = rounds(["cublas", "mine"], 3, take)
    assert order == ["cublas", "mine", "mine", "cublas", "cublas", "mine"]
    r = res["mine"]
    assert len(r.turns) == 3 and r.ms == 1.58 and r.power_limited
    assert r.kcycles == pytest.approx(1.58 * 1350.0)  # ms x MHz = thousands of cycles
    assert r.joules == pytest.approx(698.0 * 1.58e-3)
    quiet = rounds(["x"], 1, lambda n: Turn(2.0, None, None, 10))["x"]
    assert quiet.kcycles is None and quiet.joules is None and not quiet.power_limited
    with pytest.raises(ValueError, match="turns must be at least 1"):
        rounds(["x"], 0, take)
