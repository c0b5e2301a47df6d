"""The simulated Alertmanager's rules, pure: fingerprints, what a flush sends, scaled timers."""

from __future__ import annotations

from simulator.alertmanager import AlertmanagerTimings, LogEntry, fingerprint, needs_update

NOW = 10_000.0
REPEAT = 4 * 3600.0


def _sent(firing: set[str], at: float = NOW - 60) -> LogEntry:
    return LogEntry(firing=frozenset(firing), resolved=frozenset(), at=at)


def test_the_fingerprint_is_prometheus_label_set_fingerprint_as_16_hex_digits() -> None:
    # prometheus/common model/signature_test.go: labelSetToFingerprint of the same sets.
    assert fingerprint({}) == f"{14695981039346656037:016x}"
    labels = {"name": "garland, briggs", "fear": "love is not enough"}
    assert int(fingerprint(labels), 16) == 5799056148416392346
    assert fingerprint(dict(reversed(labels.items()))) == fingerprint(labels)


def test_a_group_never_notified_is_sent_only_when_something_fires() -> None:
    assert needs_update(None, frozenset({"a"}), frozenset(), REPEAT, NOW) == "first notification"
    assert needs_update(None, frozenset(), frozenset({"a"}), REPEAT, NOW) is None


def test_a_failed_notification_changes_nothing_so_the_next_flush_sends_the_same_again() -> None:
    # Only a successful notification writes the log: after a failure the entry is the old one.
    before = _sent({"a"})
    assert needs_update(before, frozenset({"a", "b"}), frozenset(), REPEAT, NOW) == (
        "new alerts in group"
    )
    assert needs_update(before, frozenset({"a", "b"}), frozenset(), REPEAT, NOW + 300) == (
        "new alerts in group"
    )


def test_resolutions_are_sent_once_and_only_for_alerts_the_receiver_was_told_about() -> None:
    assert needs_update(_sent({"a"}), frozenset(), frozenset({"a"}), REPEAT, NOW) == (
        "all alerts resolved"
    )
    assert needs_update(_sent({"a", "b"}), frozenset({"a"}), frozenset({"b"}), REPEAT, NOW) == (
        "new resolved alerts"
    )
    assert needs_update(_sent(set()), frozenset(), frozenset({"a"}), REPEAT, NOW) is None


def test_an_unchanged_group_is_sent_again_only_after_the_repeat_interval() -> None:
    entry = _sent({"a"}, at=NOW)
    assert needs_update(entry, frozenset({"a"}), frozenset(), REPEAT, NOW + REPEAT - 1) is None
    assert needs_update(entry, frozenset({"a"}), frozenset(), REPEAT, NOW + REPEAT + 1) == (
        "repeat interval elapsed"
    )


def test_scaled_timings_divide_alertmanagers_defaults_and_keep_the_http_backoff() -> None:
    scaled = AlertmanagerTimings.scaled(60)
    assert (scaled.group_wait, scaled.group_interval, scaled.repeat_interval) == (0.5, 5.0, 240.0)
    assert scaled.rule_for == 1.0
    assert scaled.flush_timeout == 5.0
    assert scaled.retry_initial == AlertmanagerTimings().retry_initial
