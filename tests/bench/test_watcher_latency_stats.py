"""The watcher benchmark's latency figures: percentiles, and medians by tenth to show a backlog."""

from bench.watcher import by_tenth, percentiles


def test_percentiles_of_a_hundred_latencies() -> None:
    values = [i / 100 for i in range(1, 101)]  # 0.01 .. 1.00 s
    result = percentiles(values)
    assert result["p50_s"] == 0.505
    assert result["p99_s"] == 0.99
    assert result["max_s"] == 1.0


def test_no_latency_gives_no_percentiles() -> None:
    assert percentiles([]) == {}
    assert percentiles([0.2]) == {"p50_s": 0.2, "p99_s": 0.2, "max_s": 0.2}


def test_a_growing_backlog_shows_as_rising_medians_by_tenth() -> None:
    values = [i * 0.01 for i in range(100)]
    tenths = by_tenth(values)
    assert len(tenths) == 10
    assert tenths == sorted(tenths)
    assert tenths[0] < 0.1 < 0.9 < tenths[-1]


def test_fewer_than_ten_latencies_have_no_tenths() -> None:
    assert by_tenth([0.1] * 9) == []
