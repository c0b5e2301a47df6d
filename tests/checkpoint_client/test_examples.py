"""deploy/examples/: the training loop answers over HTTP, and the manifests give it exactly that.

The example loop runs against the Kubernetes API emulator with the real client;
every request it makes is resolved to RBAC attributes as the API server would and
compared with the example Role both ways (allowed, and every rule used).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import kubernetes_validate
import pytest

from checkpoint_client import (
    ANSWER_ANNOTATION,
    OPT_IN_ANNOTATION,
    STEP_TIME_ANNOTATION,
    SUPPORTED,
    CheckpointClient,
)
from checkpoint_client.client import PODINFO_DIR
from simulator.kube_api import KubeApiServer, KubeStore
from tests.checkpoint_client.test_client_http import NS, Pod, make_client, request_value
from tests.deploy.rbac_support import attributes, rule_accesses
from tests.deploy.support import DEPLOY, yaml_documents
from tests.deploy.vap_support import refusals
from tests.deploy.vap_support import request as admission_request

EXAMPLES = DEPLOY / "examples"


def load_train() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_train", EXAMPLES / "train.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


train = load_train()


def docs(name: str) -> list[dict[str, Any]]:
    return yaml_documents(EXAMPLES / name)


def one(found: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [doc] = [d for d in found if d["kind"] == kind]
    return doc


@pytest.fixture
def api() -> Iterator[KubeApiServer]:
    store = KubeStore()
    with KubeApiServer(store) as server:
        yield server
    store.close()


@pytest.fixture
def pod(api: KubeApiServer, tmp_path: Path) -> Pod:
    return Pod(api.store, tmp_path)


@pytest.fixture
def client(api: KubeApiServer, pod: Pod, tmp_path: Path) -> CheckpointClient:
    token = tmp_path / "token"
    token.write_text("eyJhbGciOiJSUzI1NiJ9.service-account\n")
    return make_client(api, pod, token)


def answer(pod: Pod) -> dict[str, Any]:
    return dict(json.loads(pod.annotations()[ANSWER_ANNOTATION]))


def test_the_loop_saves_at_once_for_a_checkpoint_first_request_and_resumes_from_it(
    client: CheckpointClient, pod: Pod, tmp_path: Path
) -> None:
    seen: list[int] = []

    def step(n: int, state: dict[str, float]) -> None:
        seen.append(n)
        if n == 7:
            pod.annotate(request=request_value())  # the remediation asks mid-run

    ckpt = tmp_path / "ckpt"
    last = train.train(
        client, ckpt, total_steps=30, checkpoint_every=100, poll_every=5, step_fn=step
    )
    assert last == 30
    assert answer(pod)["step"] == 10  # the first poll after the request
    assert train.load_checkpoint(ckpt)[0] == 30  # the run's last save

    seen.clear()
    train.train(client, ckpt, total_steps=35, checkpoint_every=100, poll_every=5, step_fn=step)
    assert seen[0] == 30  # a restarted pod continues from its checkpoint


def test_a_when_idle_request_is_answered_by_the_next_regular_save(
    client: CheckpointClient, pod: Pod, tmp_path: Path
) -> None:
    pod.annotate(request=request_value(urgency="when_idle"))
    train.train(client, tmp_path / "c", total_steps=25, checkpoint_every=10, poll_every=2)
    assert answer(pod)["step"] == 10


def test_the_example_role_allows_every_call_of_the_loop_and_nothing_more(
    api: KubeApiServer, client: CheckpointClient, pod: Pod, tmp_path: Path
) -> None:
    pod.annotate(request=request_value())
    train.train(client, tmp_path / "c", total_steps=4, checkpoint_every=100, poll_every=2)
    assert ANSWER_ANNOTATION in pod.annotations()
    made = {attributes(r.method, r.path, r.query) for r in api.requests() if r.status}
    role = rule_accesses(one(docs("checkpoint-rbac.yaml"), "Role")["rules"])
    assert made == role, (sorted(map(str, made)), sorted(map(str, role)))


def test_a_pod_without_the_annotations_volume_fails_at_the_start(
    api: KubeApiServer, tmp_path: Path
) -> None:
    lost = CheckpointClient(namespace=NS, pod_name="p", annotations_path=tmp_path / "missing")
    with pytest.raises(train.CheckpointClientError, match="downwardAPI"):
        train.train(lost, tmp_path / "c", total_steps=1, checkpoint_every=1, poll_every=1)


@pytest.mark.parametrize("version", ["1.30.0", "1.37.0"])
@pytest.mark.parametrize("name", ["checkpoint-rbac.yaml", "checkpoint-training-job.yaml"])
def test_the_example_manifests_are_valid_kubernetes_objects(name: str, version: str) -> None:
    for doc in docs(name):
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_job_opts_in_mounts_what_the_client_reads_and_ignores_disruptions() -> None:
    job = one(docs("checkpoint-training-job.yaml"), "Job")
    template = job["spec"]["template"]
    assert template["metadata"]["annotations"][OPT_IN_ANNOTATION] == SUPPORTED
    spec = template["spec"]
    assert spec["restartPolicy"] == "Never"
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert rules[0] == {
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }
    [container] = spec["containers"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    [volume] = [v for v in spec["volumes"] if "downwardAPI" in v]
    [item] = volume["downwardAPI"]["items"]
    assert item["fieldRef"]["fieldPath"] == "metadata.annotations"
    [mount] = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert Path(mount["mountPath"]) / item["path"] == PODINFO_DIR / "annotations"


def test_the_rbac_binds_the_jobs_account_and_the_policy_guards_exactly_that_account() -> None:
    rbac = docs("checkpoint-rbac.yaml")
    job = one(docs("checkpoint-training-job.yaml"), "Job")
    account = one(rbac, "ServiceAccount")["metadata"]
    namespace = job["metadata"]["namespace"]
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == account["name"]
    assert account["namespace"] == namespace
    binding = one(rbac, "RoleBinding")
    assert binding["roleRef"]["name"] == one(rbac, "Role")["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": namespace}
    ]
    policy = one(rbac, "ValidatingAdmissionPolicy")
    [condition] = policy["spec"]["matchConditions"]
    user = f"system:serviceaccount:{namespace}:{account['name']}"
    assert condition["expression"] == f"request.userInfo.username == '{user}'"
    checks = " ".join(v["expression"] for v in policy["spec"]["validations"])
    assert "authentication.kubernetes.io/pod-name" in checks
    variables = " ".join(v["expression"] for v in policy["spec"]["variables"])
    assert ANSWER_ANNOTATION in variables
    assert STEP_TIME_ANNOTATION in variables
    policy_binding = one(rbac, "ValidatingAdmissionPolicyBinding")
    assert policy_binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert policy_binding["spec"]["validationActions"] == ["Deny"]
    selector = policy_binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"]
    assert selector == {"kubernetes.io/metadata.name": namespace}


def pod_write(
    changes: dict[str, str], *, bound_pod: str = "trainer-0", name: str = "trainer-0"
) -> dict[str, Any]:
    """The job's service account patching pod ``name``'s annotations (a PATCH is an UPDATE)."""
    rbac = docs("checkpoint-rbac.yaml")
    account = one(rbac, "ServiceAccount")["metadata"]
    before = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": account["namespace"],
            "labels": {"app": "llm"},
            "annotations": {OPT_IN_ANNOTATION: SUPPORTED},
        },
        "spec": {"nodeName": "gpu-1"},
    }
    after = json.loads(json.dumps(before))
    after["metadata"]["annotations"].update(changes)
    user = f"system:serviceaccount:{account['namespace']}:{account['name']}"
    req = admission_request("UPDATE", user, old=before, new=after)
    req["userInfo"]["extra"] = {"authentication.kubernetes.io/pod-name": [bound_pod]}
    return req


@pytest.mark.parametrize(
    "changes",
    [
        {ANSWER_ANNOTATION: '{"version":1}'},
        {STEP_TIME_ANNOTATION: '{"version":1,"step":10,"seconds":2.0,"steps":10}'},
        {ANSWER_ANNOTATION: "x", STEP_TIME_ANNOTATION: "y"},
    ],
)
def test_the_job_may_write_its_answer_and_step_time_on_its_own_pod(changes: dict[str, str]) -> None:
    policy = one(docs("checkpoint-rbac.yaml"), "ValidatingAdmissionPolicy")
    assert refusals(policy, pod_write(changes)) == []


def test_the_job_may_not_write_another_annotation_nor_on_another_pod() -> None:
    policy = one(docs("checkpoint-rbac.yaml"), "ValidatingAdmissionPolicy")
    other = pod_write({"gpu-remediation.io/checkpoint-request": "forged"})
    assert any("may change only" in m for m in refusals(policy, other))
    elsewhere = pod_write({STEP_TIME_ANNOTATION: "x"}, bound_pod="trainer-1")
    assert refusals(policy, elsewhere) == ["a training pod may write only on its own pod"]
