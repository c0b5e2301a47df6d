"""The semaphore benchmark's exact cap check, counted from the semaphore's history."""

from bench.semaphore_history import GRANT, RELEASE, peak_permits_out


def test_the_peak_is_the_most_grants_not_yet_released() -> None:
    changes = [
        (GRANT, "a"),
        (GRANT, "b"),
        (RELEASE, "a"),
        (GRANT, "c"),
        (GRANT, "d"),
        (RELEASE, "b"),
        (RELEASE, "c"),
    ]
    assert peak_permits_out(changes) == 3


def test_a_grant_sent_again_to_the_same_request_counts_once() -> None:
    assert peak_permits_out([(GRANT, "a"), (GRANT, "a"), (GRANT, "b")]) == 2


def test_releasing_a_request_that_was_never_granted_frees_nothing() -> None:
    changes = [(GRANT, "a"), (GRANT, "b"), (RELEASE, "waiter"), (GRANT, "c")]
    assert peak_permits_out(changes) == 3


def test_no_grants_means_no_permits_out() -> None:
    assert peak_permits_out([(RELEASE, "a")]) == 0
