"""`inject` on a cluster's dump: a `kubectl get deployments -o yaml` List of N
vLLM Deployments (each about 2.3 KB, as kubectl prints them: metadata, strategy,
probes, resources, status), wired with `--via image`, in one process.

Each size is timed on the same machine in one run (median of --runs); the time
per Deployment shows whether the work grows linearly. Each result is checked:
every Deployment wired (one `injected` line each), the output parses, and a
second run over the output changes nothing.

    python benchmarks/inject_speed.py [--sizes 25,200,1500] [--runs 3] [--json PATH]
"""

from __future__ import annotations

import statistics
import time

from _bench import parser, table, write_json

from drainhook.cli.main import wait
from drainhook.inject.options import Options
from drainhook.inject.run import inject_texts

ITEM = """\
- apiVersion: apps/v1
  kind: Deployment
  metadata:
    annotations:
      deployment.kubernetes.io/revision: "3"
    creationTimestamp: "2026-11-02T10:11:12Z"
    generation: 3
    labels:
      app.kubernetes.io/name: vllm-{i}
    name: vllm-{i}
    namespace: inference
    resourceVersion: "{rv}"
    uid: 6a1f3c2e-0000-4000-8000-{i:012d}
  spec:
    progressDeadlineSeconds: 600
    replicas: 2
    revisionHistoryLimit: 10
    selector:
      matchLabels:
        app.kubernetes.io/name: vllm-{i}
    strategy:
      rollingUpdate:
        maxSurge: 25%
        maxUnavailable: 25%
      type: RollingUpdate
    template:
      metadata:
        creationTimestamp: null
        labels:
          app.kubernetes.io/name: vllm-{i}
      spec:
        containers:
        - args:
          - --model
          - Qwen/Qwen2.5-1.5B-Instruct
          - --port
          - "8000"
          - --max-model-len
          - "8192"
          command:
          - vllm
          - serve
          env:
          - name: HF_HOME
            value: /data/hf
          image: vllm/vllm-openai:v0.19.1
          imagePullPolicy: IfNotPresent
          name: vllm
          ports:
          - containerPort: 8000
            name: http
            protocol: TCP
          readinessProbe:
            failureThreshold: 3
            httpGet:
              path: /health
              port: 8000
              scheme: HTTP
            periodSeconds: 10
            successThreshold: 1
            timeoutSeconds: 1
          resources:
            limits:
              nvidia.com/gpu: "1"
            requests:
              cpu: "4"
              memory: 16Gi
              nvidia.com/gpu: "1"
          terminationMessagePath: /dev/termination-log
          terminationMessagePolicy: File
          volumeMounts:
          - mountPath: /data
            name: data
        dnsPolicy: ClusterFirst
        restartPolicy: Always
        schedulerName: default-scheduler
        securityContext: {{}}
        terminationGracePeriodSeconds: 30
        volumes:
        - emptyDir: {{}}
          name: data
  status:
    availableReplicas: 2
    observedGeneration: 3
    readyReplicas: 2
    replicas: 2
    updatedReplicas: 2
"""


def dump(n: int) -> str:
    """What `kubectl get deployments -o yaml` prints for n of them."""
    items = "".join(ITEM.format(i=i, rv=1000 + i) for i in range(n))
    return f'apiVersion: v1\nitems:\n{items}kind: List\nmetadata:\n  resourceVersion: ""\n'


def timed(n: int, runs: int) -> dict[str, float]:
    text = dump(n)
    options = Options(via="image", wait_params=tuple(wait.params), binary_given=True)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = inject_texts([("list.yaml", text)], options)
        times.append(time.perf_counter() - start)
        injected = [line for line in done.lines if ": injected: " in line]
        assert done.code == 0 and len(injected) == n, done.lines[:3]
    again = inject_texts([("list.yaml", done.stdout)], options)
    assert again.stdout == done.stdout, "a second run changed the output"
    median = statistics.median(times)
    return {"deployments": n, "mb": len(text) / 1e6, "s": median, "ms_each": 1000 * median / n}


def main() -> None:
    p = parser(__doc__, hook=False)
    p.add_argument("--sizes", default="25,200,1500")
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    rows = [timed(int(n), args.runs) for n in args.sizes.split(",")]
    print(
        table(
            ["Deployments", "MB", "s", "ms each"],
            [
                [r["deployments"], f"{r['mb']:.2f}", f"{r['s']:.2f}", f"{r['ms_each']:.1f}"]
                for r in rows
            ],
        )
    )
    write_json(args.json, "inject_speed", {"sizes": rows})


if __name__ == "__main__":
    main()
