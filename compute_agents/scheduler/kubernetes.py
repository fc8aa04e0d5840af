"""The autoscaler's Kubernetes actuator: a subtree's replicas are its Deployment's scale subresource.

Reading and patching ``deployments/scale`` rather than the Deployment needs only ``get`` and ``patch``
on that subresource, and leaves the rest of the Deployment to whoever applies it (Helm, Argo CD,
``kubectl apply``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from .actuator import ScaleFailed


class KubernetesActuator:
    """Carries out the autoscaler's replica counts on the Deployments of one namespace."""

    def __init__(
        self,
        api: client.ApiClient | client.AppsV1Api,
        namespace: str,
        deployments: Mapping[str, str],
        *,
        timeout_s: float = 10.0,
    ) -> None:
        """``deployments`` maps each subtree to the name of its Deployment in ``namespace``."""
        self._api = api if isinstance(api, client.AppsV1Api) else client.AppsV1Api(api)
        self._namespace = namespace
        self._deployments = dict(deployments)
        self._timeout_s = float(timeout_s)

    @classmethod
    def from_config(
        cls, namespace: str, deployments: Mapping[str, str], *, kubeconfig: Path | None = None
    ) -> KubernetesActuator:
        """In a pod with no ``kubeconfig`` named: the pod's service account. Otherwise the kubeconfig
        (``$KUBECONFIG`` or ``~/.kube/config`` when none is named), its current context."""
        configuration = client.Configuration()
        if kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ:
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(
                config_file=None if kubeconfig is None else str(kubeconfig),
                client_configuration=configuration,
            )
        return cls(client.ApiClient(configuration), namespace, deployments)

    def subtrees(self) -> tuple[str, ...]:
        return tuple(self._deployments)

    def replicas(self, subtree: str) -> int:
        """The replicas the subtree's Deployment asks for now (its ``spec.replicas``)."""
        deployment = self._deployment(subtree)
        try:
            scale = self._api.read_namespaced_deployment_scale(
                deployment, self._namespace, _request_timeout=self._timeout_s
            )
        except (ApiException, urllib3.exceptions.HTTPError) as error:
            raise self._failed("read the scale of", subtree, deployment, error) from error
        # autoscaling/v1 leaves spec.replicas out when it is 0 (omitempty).
        return (scale.spec.replicas if scale.spec is not None else None) or 0

    def scale(self, subtree: str, replicas: int) -> None:
        """Ask the subtree's Deployment for ``replicas`` replicas."""
        deployment = self._deployment(subtree)
        if replicas < 0:
            raise ValueError(f"cannot scale subtree {subtree!r} to {replicas} replicas: 0 or more are needed")
        try:
            self._api.patch_namespaced_deployment_scale(
                deployment,
                self._namespace,
                {"spec": {"replicas": replicas}},
                _request_timeout=self._timeout_s,
            )
        except (ApiException, urllib3.exceptions.HTTPError) as error:
            raise self._failed(f"scale to {replicas} replicas", subtree, deployment, error) from error

    def _deployment(self, subtree: str) -> str:
        try:
            return self._deployments[subtree]
        except KeyError:
            mapped = ", ".join(sorted(self._deployments)) or "none"
            raise ValueError(
                f"no Deployment is mapped to subtree {subtree!r} (subtrees mapped: {mapped})"
            ) from None

    def _failed(
        self, action: str, subtree: str, deployment: str, error: ApiException | urllib3.exceptions.HTTPError
    ) -> ScaleFailed:
        where = f"deployment {deployment!r} of subtree {subtree!r} in namespace {self._namespace!r}"
        if isinstance(error, urllib3.exceptions.HTTPError):
            return ScaleFailed(f"could not {action} {where}: no answer from the API ({error})", None)
        said = _status_message(error.body)
        return ScaleFailed(
            f"could not {action} {where}: HTTP {error.status} {error.reason}" + (f": {said}" if said else ""),
            error.status,
        )


def _status_message(body: str | None) -> str:
    """The message of the Kubernetes ``Status`` object an error answer carries (say, which RBAC verb
    the service account lacks), or nothing."""
    try:
        status = json.loads(body or "")
    except ValueError:
        return ""
    message = status.get("message") if isinstance(status, dict) else None
    return message if isinstance(message, str) else ""
