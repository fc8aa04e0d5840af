"""What the factory hands the operator to deploy an ONNX capability: the executor's configuration (the
file `compute_agents serve --onnx-config` reads), a compose service beside docker/compose.yaml's
executors, and a Kubernetes Deployment with its ConfigMap. The model file is not inside them: it is
fetched by its digest (`GET /v1/factory/artifacts/<sha256>`) into the models volume, and the executor
refuses a file whose digest differs."""

from __future__ import annotations

import json
from typing import Any

import yaml

from catalog.models import Capability

CONFIG_DIR = "/etc/treemeter/onnx"
MODELS_DIR = "/var/lib/treemeter-agent/models"


def model_file(capability: Capability) -> str:
    return f"{capability.code}.onnx"


def executor_config(
    capability: Capability, package_code: str, inputs: list[dict[str, Any]], outputs: list[dict[str, Any]]
) -> dict[str, Any]:
    assert capability.artifact is not None
    return {
        "capabilities": [
            {
                "code": capability.code,
                "model": capability.model_id,
                "package": package_code,
                "artifact": {
                    "path": f"{MODELS_DIR}/{model_file(capability)}",
                    "sha256": capability.artifact.sha256,
                },
                "inputs": inputs,
                "outputs": outputs,
                "timeout_ms": capability.sla_timeout_ms,
            }
        ]
    }


def _command(capability: Capability) -> list[str]:
    return [
        "python",
        "-m",
        "compute_agents",
        "serve",
        "--host",
        "0.0.0.0",  # noqa: S104 - the container's port is published, the process must listen on it
        "--port",
        "8100",
        "--onnx-config",
        f"{CONFIG_DIR}/{capability.code}.json",
    ]


def compose_service(capability: Capability) -> str:
    """A service for docker/compose.yaml (it uses that file's `x-serving` anchors)."""
    name = f"executor-{capability.code}"
    service = {
        name: {
            "<<": "*serving",
            "command": _command(capability),
            "environment": {"<<": "*serving-env", "TREEMETER_AGENT_ID": name},
            "volumes": [
                f"{name}-data:/var/lib/treemeter-agent",
                f"./onnx/{capability.code}.json:{CONFIG_DIR}/{capability.code}.json:ro",
                f"./models/{model_file(capability)}:{MODELS_DIR}/{model_file(capability)}:ro",
            ],
        }
    }
    text = yaml.safe_dump({"services": service}, sort_keys=False, width=120)
    # YAML merge keys are anchors, not strings: unquote them so compose resolves the shared settings.
    return text.replace("'<<': '*serving'", "<<: *serving").replace(
        "'<<': '*serving-env'", "<<: *serving-env"
    )


def kubernetes_manifest(capability: Capability, config: dict[str, Any], image: str) -> str:
    name = f"executor-{capability.code}"
    # A copy where each is used: PyYAML writes one shared dict as an anchor and aliases (&id001 / *id001).
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "treemeter"}
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-config", "labels": dict(labels)},
        "data": {f"{capability.code}.json": json.dumps(config)},  # one line: YAML would escape every newline
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "containers": [
                        {
                            "name": "executor",
                            "image": image,
                            "command": _command(capability),
                            "env": [{"name": "TREEMETER_AGENT_ID", "value": name}],
                            "ports": [{"containerPort": 8100, "name": "http"}],
                            "readinessProbe": {"httpGet": {"path": "/metrics", "port": "http"}},
                            "resources": {
                                "requests": {"cpu": "1", "memory": "1Gi"},
                                "limits": {"memory": "2Gi"},
                            },
                            "volumeMounts": [
                                {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                                {"name": "models", "mountPath": MODELS_DIR, "readOnly": True},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "config", "configMap": {"name": f"{name}-config"}},
                        {"name": "models", "persistentVolumeClaim": {"claimName": "treemeter-models"}},
                    ],
                },
            },
        },
    }
    return yaml.safe_dump_all([config_map, deployment], sort_keys=False, width=120)
