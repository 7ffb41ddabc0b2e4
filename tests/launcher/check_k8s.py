#!/usr/bin/python3
"""Checks the Kubernetes examples (examples/k8s/*.yaml) without a cluster.

Debian has no Kubernetes schema validator (no kubeconform, no kubeval), so this parses every
document with PyYAML and checks what the examples rely on: apiVersion, kind and metadata.name
everywhere; selectors that match their pod templates; the etcd StatefulSet and its Services;
the training Job's agent command (bagua-agent, --rdzv-endpoint etcd:2379, --nnodes MIN:MAX,
--secret-file on a file the pod mounts from the Secret); container env references that exist.

    check_k8s.py DIR        exit 0, or 1 with one line per problem
"""
import glob
import os
import re
import sys

try:
    import yaml
except ImportError:  # python3-yaml is missing: skip, as ctest maps 77 to "skipped"
    print("python3-yaml is not installed (Debian package python3-yaml)")
    sys.exit(77)

problems = []


def fail(where, what):
    problems.append("%s: %s" % (where, what))


def get(obj, path, default=None):
    for key in path.split("."):
        if not isinstance(obj, dict) or key not in obj:
            return default
        obj = obj[key]
    return obj


def check_pod_spec(where, spec, labels):
    if not isinstance(spec, dict):
        fail(where, "template.spec is missing")
        return
    containers = spec.get("containers") or []
    if not containers:
        fail(where, "the pod has no containers")
    volumes = {v.get("name") for v in spec.get("volumes") or []}
    for c in containers + (spec.get("initContainers") or []):
        cw = "%s container %s" % (where, c.get("name"))
        if not c.get("name") or not c.get("image"):
            fail(cw, "name and image are required")
        env = {e.get("name") for e in c.get("env") or []}
        # $(VAR) in command and args must name a variable the container defines.
        for word in (c.get("command") or []) + (c.get("args") or []):
            if not isinstance(word, str):
                fail(cw, "command/args word %r is not a string (quote numbers)" % (word,))
                continue
            for ref in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", word):
                if ref not in env:
                    fail(cw, "$(%s) is used but not in env" % ref)
        for m in c.get("volumeMounts") or []:
            if m.get("name") not in volumes:
                fail(cw, "volumeMount %s names no volume of the pod" % m.get("name"))


def check_workload(where, doc):
    labels = get(doc, "spec.template.metadata.labels") or {}
    match = get(doc, "spec.selector.matchLabels")
    if doc["kind"] != "Job" or match:
        for k, v in (match or {}).items():
            if labels.get(k) != v:
                fail(where, "selector %s=%s does not match the pod template's labels" % (k, v))
        if match is None:
            fail(where, "spec.selector.matchLabels is missing")
    check_pod_spec(where, get(doc, "spec.template.spec"), labels)


def agent_args(doc):
    for c in get(doc, "spec.template.spec.containers") or []:
        words = (c.get("command") or []) + (c.get("args") or [])
        if any(isinstance(w, str) and os.path.basename(w) == "bagua-agent" for w in words):
            return c, [str(w) for w in words]
    return None, []


def flag(words, name):
    if name in words and words.index(name) + 1 < len(words):
        return words[words.index(name) + 1]
    return None


def main():
    directory = sys.argv[1]
    docs = []
    files = sorted(glob.glob(os.path.join(directory, "*.yaml")))
    if not files:
        fail(directory, "no *.yaml files")
    for path in files:
        with open(path) as f:
            try:
                for doc in yaml.safe_load_all(f):
                    if doc is not None:
                        docs.append((os.path.basename(path), doc))
            except yaml.YAMLError as e:
                fail(path, "not valid YAML: %s" % e)
    by_kind = {}
    for name, doc in docs:
        where = "%s %s/%s" % (name, doc.get("kind"), get(doc, "metadata.name"))
        for field in ("apiVersion", "kind"):
            if not doc.get(field):
                fail(where, "%s is required" % field)
        if not get(doc, "metadata.name"):
            fail(where, "metadata.name is required")
        if doc.get("kind") in ("StatefulSet", "Deployment", "Job"):
            check_workload(where, doc)
        by_kind.setdefault(doc.get("kind"), []).append(doc)

    # etcd: a StatefulSet behind a Service named etcd on port 2379.
    sts = [d for d in by_kind.get("StatefulSet", []) if get(d, "metadata.name") == "etcd"]
    if not sts:
        fail("etcd.yaml", "no StatefulSet named etcd")
    services = {get(d, "metadata.name"): d for d in by_kind.get("Service", [])}
    svc = services.get("etcd")
    if not svc or 2379 not in [p.get("port") for p in get(svc, "spec.ports", [])]:
        fail("etcd.yaml", "no Service etcd with port 2379 (the agents' --rdzv-endpoint etcd:2379)")
    for s in sts:
        if get(s, "spec.serviceName") not in services:
            fail("etcd.yaml", "StatefulSet etcd's serviceName names no Service")

    # The training job: bagua-agent per pod, elastic, etcd:2379, the secret from a file.
    workloads = by_kind.get("Job", []) + by_kind.get("Deployment", [])
    trains = [d for d in workloads if agent_args(d)[0]]
    if not trains:
        fail("train-job.yaml", "no Job or Deployment whose container runs bagua-agent")
    for d in trains:
        where = "%s/%s" % (d["kind"], get(d, "metadata.name"))
        container, words = agent_args(d)
        if flag(words, "--rdzv-endpoint") != "etcd:2379":
            fail(where, "bagua-agent needs --rdzv-endpoint etcd:2379")
        nnodes = flag(words, "--nnodes") or ""
        m = re.fullmatch(r"(\d+):(\d+)", nnodes)
        if not m or not 1 <= int(m.group(1)) < int(m.group(2)):
            fail(where, "--nnodes must be MIN:MAX with 1 <= MIN < MAX (elastic), got %r" % nnodes)
        elif d["kind"] == "Job":
            par = get(d, "spec.parallelism", 1)
            if not int(m.group(1)) <= par <= int(m.group(2)):
                fail(where, "parallelism %s is outside --nnodes %s" % (par, nnodes))
        if "--" not in words or words.index("--") == len(words) - 1:
            fail(where, "bagua-agent needs -- PROGRAM")
        if flag(words, "--job-id") is None:
            fail(where, "bagua-agent needs --job-id (the same on every pod)")
        secret = flag(words, "--secret-file")
        spec = get(d, "spec.template.spec")
        if not secret:
            fail(where, "bagua-agent needs --secret-file (the job secret from a Secret)")
        else:
            mounts = [m.get("mountPath") for m in container.get("volumeMounts") or []]
            if not any(secret.startswith(p.rstrip("/") + "/") for p in mounts):
                fail(where, "--secret-file %s is under no volumeMount of the agent" % secret)
            secret_vols = [v for v in spec.get("volumes") or [] if "secret" in v]
            if not secret_vols:
                fail(where, "the pod has no Secret volume for the job secret")
            for v in secret_vols:
                if get(v, "secret.defaultMode", 0o644) & 0o077:
                    fail(where, "Secret volume %s is readable by group or others" % v["name"])
        if d["kind"] == "Job":
            if get(d, "spec.template.spec.restartPolicy") not in ("Never", "OnFailure"):
                fail(where, "a Job's pods need restartPolicy Never or OnFailure")
            if get(d, "spec.podFailurePolicy") and spec.get("restartPolicy") != "Never":
                fail(where, "podFailurePolicy needs restartPolicy Never")
        labels = get(d, "spec.template.metadata.labels") or {}
        if labels.get("bagua.example/etcd-client") != "true":
            fail(where, "the pods lack the label the etcd NetworkPolicy admits")
        grace = spec.get("terminationGracePeriodSeconds", 30)
        grace_ms = int(flag(words, "--grace-ms") or 5000)
        if grace * 1000 < 2 * grace_ms + 3000:
            fail(where, "terminationGracePeriodSeconds %s is shorter than 2 x --grace-ms + 3 s "
                 "(the agent's graceful leave)" % grace)

    for p in problems:
        print(p)
    print("%d document(s) in %d file(s), %d problem(s)" % (len(docs), len(files), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
