"""The fan-out benchmark's accounting: what a watch received against what the store committed."""

from bench.kube_fanout import account


def test_a_watch_that_received_every_change_in_its_window_lost_nothing() -> None:
    count = account("w", committed=[3, 5, 7, 9], received=[5, 7, 9], start_rv=3, end_rv=9)
    assert (count.committed, count.received, count.missing) == (3, 3, 0)
    assert count.duplicates == count.unexpected == 0
    assert count.in_order


def test_changes_outside_the_window_are_not_counted() -> None:
    # Before the watch's list (<= 3) and after the end of the load (> 9).
    count = account("w", committed=[2, 3, 5, 11], received=[5, 11, 12], start_rv=3, end_rv=9)
    assert (count.committed, count.received, count.missing, count.unexpected) == (1, 1, 0, 0)


def test_a_change_that_never_arrived_is_missing() -> None:
    count = account("w", committed=[4, 5, 6, 7], received=[4, 7], start_rv=3, end_rv=7)
    assert count.missing == 2


def test_a_change_received_twice_is_a_duplicate_and_out_of_order() -> None:
    count = account("w", committed=[4, 5, 6], received=[4, 5, 5, 6], start_rv=3, end_rv=6)
    assert (count.missing, count.duplicates) == (0, 1)
    assert not count.in_order


def test_a_version_the_store_never_committed_for_the_resource_is_unexpected() -> None:
    count = account("w", committed=[4, 6], received=[4, 5, 6], start_rv=3, end_rv=6)
    assert (count.missing, count.unexpected) == (0, 1)
