"""The semaphore benchmarks' FIFO check: grants against the order requests arrived."""

from bench.semaphore_history import overtaken


def test_grants_in_request_order_overtake_nobody() -> None:
    assert overtaken(["a", "b", "c"], ["a", "b", "c"]) == []


def test_a_request_granted_after_a_later_one_is_named() -> None:
    assert overtaken(["a", "b", "c", "d"], ["a", "c", "b", "d"]) == ["b"]


def test_every_request_a_late_grant_jumps_over_is_named_once() -> None:
    assert overtaken(["a", "b", "c", "d"], ["d", "a", "b", "c"]) == ["a", "b", "c"]


def test_repeated_requests_and_resent_grants_count_where_they_first_appear() -> None:
    requests = ["a", "b", "a", "c", "b"]
    grants = ["a", "a", "b", "c", "b"]
    assert overtaken(requests, grants) == []


def test_requests_still_waiting_at_the_end_are_not_a_violation() -> None:
    assert overtaken(["a", "b", "c"], ["a"]) == []


def test_grants_of_requests_never_received_are_left_to_the_exactly_once_check() -> None:
    assert overtaken(["a", "b"], ["stray", "a", "b"]) == []
