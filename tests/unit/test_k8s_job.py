"""Plain Kubernetes input: a batch/v1 Job as users write it (kubectl create job ... -o yaml, PyTorch-style
Indexed Jobs) becomes a gpufed job with its pod template kept, and what the broker cannot honour is
refused with the Job's field named. Also the hard edges of the native schema and of YAML reading."""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.exceptions import RequestValidationError

from broker.core import safe_yaml
from broker.core.errors import InvalidRequest
from broker.core.model import ClusterTraits, Placement, Tier
from broker.intake.parse import spec_of
from broker.workload.manifest import build_workload

# What `kubectl create job train --image=... --dry-run=client -o yaml -- python train.py` prints,
# with GPUs, env, a ConfigMap volume and a placement annotation added by hand.
KUBECTL_JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  creationTimestamp: null
  name: train
  annotations:
    gpufed.io/gpu-products: H100-80GB, A100-80GB
    gpufed.io/allow-burst: "true"
spec:
  template:
    metadata:
      creationTimestamp: null
      labels: {team: vision}
    spec:
      containers:
      - command: [python, train.py]
        args: ["--epochs", "3"]
        image: ghcr.io/example/train:1.2
        name: train
        env:
        - {name: EPOCHS, value: "3"}
        - name: API_KEY
          valueFrom: {secretKeyRef: {name: api, key: key}}
        envFrom:
        - configMapRef: {name: train-config}
        volumeMounts:
        - {name: cfg, mountPath: /etc/train, readOnly: true}
        resources:
          limits: {nvidia.com/gpu: "4", memory: 32Gi}
          requests: {cpu: "8", memory: 32Gi}
      restartPolicy: Never
      volumes:
      - name: cfg
        configMap: {name: train-config}
status: {}
"""

PYTORCH_INDEXED = """
apiVersion: batch/v1
kind: Job
metadata: {name: ddp, namespace: ml}
spec:
  completionMode: Indexed
  parallelism: 4
  completions: 4
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: worker
        image: pytorch/pytorch:2.5.0-cuda12.4-cudnn9-runtime
        command: [torchrun, --nnodes=4, --node-rank=$(JOB_COMPLETION_INDEX), train.py]
        resources: {limits: {nvidia.com/mig-1g.10gb: 2}}
"""


def _spec(text: str) -> Any:
    return spec_of(safe_yaml.load(text))


def test_a_kubectl_style_job_keeps_its_pod_template_and_reads_gpus_from_resources() -> None:
    spec = _spec(KUBECTL_JOB)
    assert (spec.name, spec.gpus, spec.pods) == ("train", 4, 1)
    assert spec.gpu_products == ["H100-80GB", "A100-80GB"]
    assert spec.allow_burst is True
    assert spec.cpu == 8.0 and spec.memory_gib == 32.0
    req = spec.to_request()
    assert req.image == "ghcr.io/example/train:1.2"
    assert req.command == ("python", "train.py") and req.args == ("--epochs", "3")
    assert req.env[1] == {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "api", "key": "key"}}}
    assert req.labels == {"team": "vision"}


def test_the_kept_template_is_written_into_the_member_cluster_job() -> None:
    req = _spec(KUBECTL_JOB).to_request()
    placement = Placement("c1", "H100-80GB", "nvidia.com/gpu", 4, 1, 90)
    manifest = build_workload("j1", 0, req, placement, ClusterTraits(name="c1", tier=Tier.ONPREM)).job
    pod = manifest["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "ghcr.io/example/train:1.2"
    assert container["command"] == ["python", "train.py"] and container["args"] == ["--epochs", "3"]
    assert container["env"][0] == {"name": "EPOCHS", "value": "3"}
    assert container["envFrom"] == [{"configMapRef": {"name": "train-config"}}]
    assert container["volumeMounts"] == [{"name": "cfg", "mountPath": "/etc/train", "readOnly": True}]
    assert pod["volumes"] == [{"name": "cfg", "configMap": {"name": "train-config"}}]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"


def test_a_pytorch_indexed_job_is_a_gang_of_mig_pods() -> None:
    spec = _spec(PYTORCH_INDEXED)
    assert (spec.pods, spec.gpus, spec.namespace) == (4, 0, "ml")
    assert spec.mig is not None and (spec.mig.profile, spec.mig.slices) == ("1g.10gb", 2)


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda j: j["spec"].update(completions=2, parallelism=4), "spec.completions"),
        (lambda j: j["spec"].update(backoffLimit=3), "spec.backoffLimit"),
        (lambda j: j["spec"].update(ttlSecondsAfterFinished=10), "spec.ttlSecondsAfterFinished"),
        (
            lambda j: j["spec"]["template"]["spec"].update(nodeSelector={"a": "b"}),
            "spec.template.spec.nodeSelector",
        ),
        (
            lambda j: j["spec"]["template"]["spec"].update(restartPolicy="OnFailure"),
            "spec.template.spec.restartPolicy",
        ),
        (
            lambda j: j["spec"]["template"]["spec"]["containers"].append({"name": "side", "image": "x"}),
            "spec.template.spec.containers[1]",
        ),
        (
            lambda j: j["spec"]["template"]["spec"]["containers"][0].update(securityContext={}),
            "spec.template.spec.containers[0].securityContext",
        ),
        (
            lambda j: j["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"].update(
                {"amd.com/gpu": 1}
            ),
            "spec.template.spec.containers[0].resources.limits[amd.com/gpu]",
        ),
        (
            lambda j: j["spec"]["template"]["spec"].update(
                volumes=[{"name": "d", "hostPath": {"path": "/"}}]
            ),
            "spec.template.spec.volumes",
        ),
        (lambda j: j["metadata"]["annotations"].update({"gpufed.io/colour": "red"}), "gpufed.io/colour"),
        (
            lambda j: j["metadata"]["annotations"].update({"gpufed.io/allow-burst": "yes"}),
            "gpufed.io/allow-burst",
        ),
        (
            lambda j: j["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "1 bad"}),
            "spec.template.spec.containers[0].env",
        ),
        (lambda j: j["metadata"].update(name="Not_A_Label"), "metadata.name"),
    ],
)
def test_what_the_broker_cannot_honour_is_refused_with_the_field_named(edit: Any, field: str) -> None:
    job = safe_yaml.load(KUBECTL_JOB)
    edit(job)
    with pytest.raises((InvalidRequest, RequestValidationError)) as info:
        spec_of(job)
    exc = info.value
    if isinstance(exc, InvalidRequest):
        named = exc.field
    else:
        assert isinstance(exc, RequestValidationError)
        named = " ".join(str(e["loc"]) for e in exc.errors())
    assert field in named


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"durationSeconds": math.inf}, "durationSeconds"),
        ({"durationSeconds": math.nan}, "durationSeconds"),
        ({"minGpuMemoryGiB": 9.2e18}, "minGpuMemoryGiB"),
        ({"minGpuMemoryGiB": 9_200_000_000_000_000_000}, "minGpuMemoryGiB"),
        ({"maxPricePerGpuHour": 1e300}, "maxPricePerGpuHour"),
        ({"cpu": math.inf}, "cpu"),
    ],
)
def test_non_finite_and_insane_numbers_are_refused_by_name(body: dict[str, Any], field: str) -> None:
    with pytest.raises(RequestValidationError) as info:
        spec_of({"name": "x", "gpus": 1, **body})
    assert [e["loc"][0] for e in info.value.errors()] == [field]


def test_native_specs_gain_image_command_args_env() -> None:
    spec = spec_of(
        {
            "name": "x",
            "gpus": 1,
            "image": "img:1",
            "command": ["sh", "-c"],
            "args": ["echo hi"],
            "env": [{"name": "A", "value": "1"}],
        }
    )
    req = spec.to_request()
    assert (req.image, req.command, req.args, req.env) == (
        "img:1",
        ("sh", "-c"),
        ("echo hi",),
        ({"name": "A", "value": "1"},),
    )


def test_a_yaml_bomb_is_refused_quickly_and_plainly() -> None:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    with pytest.raises(safe_yaml.YamlError, match="expands to more than"):
        safe_yaml.load("\n".join(lines), "bomb.yaml")
    with pytest.raises(safe_yaml.YamlError, match="recursive"):
        safe_yaml.load("a: &a [*a]")
    with pytest.raises(safe_yaml.YamlError, match="more than the limit"):
        safe_yaml.load("x: " + "y" * (safe_yaml.MAX_BYTES + 1))
    with pytest.raises(safe_yaml.YamlError, match=r"line 1, column"):
        safe_yaml.load("a: [1, 2")
    with pytest.raises(safe_yaml.YamlError):
        safe_yaml.load("!!python/object/apply:os.system ['true']")
    assert safe_yaml.load("x: &v {a: 1}\ny: *v") == {"x": {"a": 1}, "y": {"a": 1}}
