"""The semaphore benchmarks' exactly-once check: one grant per request id, nobody else."""

from bench.semaphore_history import grant_problems


def test_one_grant_each_is_no_problem() -> None:
    problems = grant_problems(["a", "b"], ["b", "a"])
    assert problems.none


def test_a_waiter_never_granted_is_named() -> None:
    problems = grant_problems(["a", "b", "c"], ["a", "c"])
    assert problems.never == ["b"]
    assert not problems.none


def test_a_grant_sent_twice_is_counted() -> None:
    problems = grant_problems(["a", "b"], ["a", "b", "a"])
    assert problems.twice == {"a": 2}
    assert not problems.none


def test_a_grant_to_an_id_nobody_expected_is_named() -> None:
    problems = grant_problems(["a"], ["a", "ghost"])
    assert problems.unexpected == ["ghost"]
    assert not problems.none
