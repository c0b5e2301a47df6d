"""The handshake's data rules: incident ids the relay may signal, answers an incident accepts."""

import uuid

from gpu_remediation.jobs import judge_answer, parse_incident_id

RUN = str(uuid.uuid4())
MINE = f"gpu-remediation/prod/gpu-1/{RUN}"


def test_an_incident_id_of_this_cluster_names_its_workflow_and_run() -> None:
    assert parse_incident_id(MINE, "prod") == ("gpu-remediation/prod/gpu-1", RUN)


def test_ids_of_other_clusters_or_malformed_ids_name_nothing() -> None:
    for value in (
        f"gpu-remediation/other/gpu-1/{RUN}",
        "gpu-remediation/prod/gpu-1",
        "gpu-remediation/prod/gpu-1/not-a-run-id",
        f"gpu-remediation/prod/GPU_1/{RUN}",
        f"gpu-remediation/prod/gpu-1/{RUN}/extra",
        "x" * 600,
    ):
        assert parse_incident_id(value, "prod") is None, value


def test_an_answer_for_this_incident_is_accepted() -> None:
    raw = f'{{"version": 1, "incident": "{MINE}", "step": 9, "extra": 1}}'
    verdict = judge_answer(raw, False, MINE)
    assert verdict.problem is None
    assert verdict.answer is not None
    assert verdict.answer.step == 9


def test_a_refusal_is_an_answer() -> None:
    raw = f'{{"version": 1, "incident": "{MINE}", "step": null, "refused": "mid-step"}}'
    verdict = judge_answer(raw, False, MINE)
    assert verdict.answer is not None
    assert verdict.answer.refused == "mid-step"


def test_bad_answers_say_why_they_are_ignored() -> None:
    cases = {
        "[]": "malformed answer",
        f'{{"version": 1, "incident": "{MINE}", "step": "ten"}}': "malformed answer (step:",
        f'{{"version": 1, "incident": "{MINE}"}}': "names no checkpoint",
        f'{{"version": 1, "incident": "{MINE}x", "step": 1}}': "another incident",
        f'{{"version": 1, "incident": "{MINE}", "step": 1, "pad": "{"p" * 1024}"}}': "oversized",
    }
    for raw, problem in cases.items():
        verdict = judge_answer(raw, False, MINE)
        assert verdict.answer is None
        assert problem in (verdict.problem or ""), raw
    assert "oversized" in (judge_answer("{}", True, MINE).problem or "")


def test_only_answers_of_contract_version_1_are_read() -> None:
    cases = {
        f'{{"incident": "{MINE}", "step": 1}}': "malformed answer (version: Field required",
        f'{{"version": 2, "incident": "{MINE}", "step": 1}}': "version 2 is not supported",
        f'{{"version": true, "incident": "{MINE}", "step": 1}}': "malformed answer (version:",
        f'{{"version": "1", "incident": "{MINE}", "step": 1}}': "malformed answer (version:",
    }
    for raw, problem in cases.items():
        verdict = judge_answer(raw, False, MINE)
        assert verdict.answer is None, raw
        assert problem in (verdict.problem or ""), (raw, verdict.problem)


def test_a_refusal_that_names_a_checkpoint_is_ignored() -> None:
    for extra in ('"step": 5', '"saved_at": "2026-12-04T13:04:31Z"'):
        raw = f'{{"version": 1, "incident": "{MINE}", "refused": "busy", {extra}}}'
        verdict = judge_answer(raw, False, MINE)
        assert verdict.answer is None, raw
        assert "a refusal names a checkpoint" in (verdict.problem or "")
