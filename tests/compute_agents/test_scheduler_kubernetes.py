"""The Kubernetes actuator, through the official client over a real socket, against a local fake of the
Kubernetes API that serves the one resource it uses: ``apps/v1`` Deployments' ``scale`` subresource."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.client import ApiClient, AppsV1Api
from kubernetes.client.exceptions import ApiException

from compute_agents.scheduler.actuator import Actuator, ScaleFailed
from compute_agents.scheduler.kubernetes import KubernetesActuator
from tests.compute_agents.fake_kubernetes import FakeKubernetes, client_for

TOKEN = "service-account-token"
NAMESPACE = "serving"
DEPLOYMENTS = {"finance": "moe-finance", "code": "moe-code", "ghost": "moe-ghost"}


@pytest.fixture
def fake() -> Iterator[FakeKubernetes]:
    server = FakeKubernetes(TOKEN, {(NAMESPACE, "moe-finance"): 3, (NAMESPACE, "moe-code"): 1})
    server.start()
    yield server
    server.stop()


@pytest.fixture
def api(fake: FakeKubernetes) -> Iterator[ApiClient]:
    with client_for(fake.url, TOKEN) as api:
        yield api


@pytest.fixture
def actuator(api: ApiClient) -> KubernetesActuator:
    return KubernetesActuator(api, NAMESPACE, DEPLOYMENTS)


def test_replicas_reads_the_deployments_scale_with_the_token(
    actuator: KubernetesActuator, fake: FakeKubernetes
) -> None:
    checked: Actuator = actuator

    assert checked.replicas("finance") == 3
    assert checked.replicas("code") == 1
    assert [(seen.method, seen.path) for seen in fake.received] == [
        ("GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/moe-finance/scale"),
        ("GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/moe-code/scale"),
    ]
    assert all(seen.headers["authorization"] == f"Bearer {TOKEN}" for seen in fake.received)


def test_scale_patches_spec_replicas_of_the_scale_subresource(
    actuator: KubernetesActuator, fake: FakeKubernetes
) -> None:
    actuator.scale("finance", 5)

    assert fake.wanted[(NAMESPACE, "moe-finance")] == 5
    assert fake.wanted[(NAMESPACE, "moe-code")] == 1
    (patch,) = fake.received
    assert patch.method == "PATCH"
    assert patch.path == f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/moe-finance/scale"
    assert json.loads(patch.body) == {"spec": {"replicas": 5}}
    # The client turns its default (JSON Patch, a list of operations) into a strategic merge for an object.
    assert patch.headers["content-type"] == "application/strategic-merge-patch+json"
    assert patch.headers["authorization"] == f"Bearer {TOKEN}"
    assert actuator.replicas("finance") == 5


def test_scale_to_zero_reads_back_zero(actuator: KubernetesActuator, fake: FakeKubernetes) -> None:
    actuator.scale("code", 0)

    assert fake.wanted[(NAMESPACE, "moe-code")] == 0
    assert actuator.replicas("code") == 0


def test_an_unknown_deployment_is_scale_failed_with_404(
    actuator: KubernetesActuator, fake: FakeKubernetes
) -> None:
    with pytest.raises(ScaleFailed) as read:
        actuator.replicas("ghost")
    with pytest.raises(ScaleFailed) as scaled:
        actuator.scale("ghost", 2)

    for failed in (read.value, scaled.value):
        assert failed.status == 404
        message = str(failed)
        for named in (
            "'ghost'",
            "'moe-ghost'",
            f"'{NAMESPACE}'",
            "404",
            'deployments.apps "moe-ghost" not found',
        ):
            assert named in message
    assert "scale to 2 replicas" in str(scaled.value)
    assert (NAMESPACE, "moe-ghost") not in fake.wanted


def test_a_wrong_token_is_scale_failed_with_401(fake: FakeKubernetes) -> None:
    with client_for(fake.url, "someone-else") as api:
        actuator = KubernetesActuator(AppsV1Api(api), NAMESPACE, DEPLOYMENTS)
        with pytest.raises(ScaleFailed, match=r"'moe-finance'.*'serving'.*HTTP 401") as read:
            actuator.replicas("finance")
        with pytest.raises(ScaleFailed, match=r"'moe-finance'.*'serving'.*HTTP 401") as scaled:
            actuator.scale("finance", 7)

    assert read.value.status == scaled.value.status == 401
    assert fake.wanted[(NAMESPACE, "moe-finance")] == 3
    assert [seen.headers["authorization"] for seen in fake.received] == ["Bearer someone-else"] * 2


def test_no_answer_is_scale_failed_without_a_status() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with client_for(f"http://127.0.0.1:{port}", TOKEN) as api:
        actuator = KubernetesActuator(api, NAMESPACE, DEPLOYMENTS, timeout_s=2)
        with pytest.raises(ScaleFailed, match=r"'moe-finance'.*'serving': no answer") as failed:
            actuator.scale("finance", 2)

    assert failed.value.status is None


def test_an_unmapped_subtree_or_a_negative_count_is_a_value_error(
    actuator: KubernetesActuator, fake: FakeKubernetes
) -> None:
    with pytest.raises(ValueError, match=r"no Deployment is mapped to subtree 'batch'"):
        actuator.replicas("batch")
    with pytest.raises(ValueError, match=r"no Deployment is mapped to subtree 'batch'"):
        actuator.scale("batch", 1)
    with pytest.raises(ValueError, match=r"subtree 'finance' to -1 replicas"):
        actuator.scale("finance", -1)

    assert fake.received == []


def test_from_config_takes_a_kubeconfig(
    fake: FakeKubernetes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(  # JSON is YAML
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": fake.url}}],
                "users": [{"name": "autoscaler", "user": {"token": TOKEN}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "autoscaler"}}],
                "current-context": "fake",
            }
        )
    )

    actuator = KubernetesActuator.from_config(NAMESPACE, DEPLOYMENTS, kubeconfig=kubeconfig)
    actuator.scale("code", 4)

    assert actuator.replicas("code") == 4
    assert [seen.headers["authorization"] for seen in fake.received] == [f"Bearer {TOKEN}"] * 2


def test_the_fake_takes_the_patch_types_the_api_takes(api: ApiClient, fake: FakeKubernetes) -> None:
    apps = AppsV1Api(api)

    apps.patch_namespaced_deployment_scale(
        "moe-code", NAMESPACE, body=[{"op": "replace", "path": "/spec/replicas", "value": 2}]
    )
    apps.patch_namespaced_deployment_scale(
        "moe-code", NAMESPACE, body={"spec": {"replicas": 6}}, _content_type="application/merge-patch+json"
    )
    with pytest.raises(ApiException) as unsupported:
        apps.patch_namespaced_deployment_scale(
            "moe-code", NAMESPACE, body={"spec": {"replicas": 9}}, _content_type="application/json"
        )

    assert [seen.headers["content-type"] for seen in fake.received] == [
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/json",
    ]
    assert unsupported.value.status == 415
    assert json.loads(unsupported.value.body or "")["reason"] == "UnsupportedMediaType"
    assert fake.wanted[(NAMESPACE, "moe-code")] == 6
    scale = apps.read_namespaced_deployment_scale("moe-code", NAMESPACE)
    assert scale.kind == "Scale"
    assert scale.api_version == "autoscaling/v1"
    assert scale.status is not None
    assert scale.status.replicas == 1
