#!/usr/bin/env python3
"""deploy/kubernetes agrees with itself and with the daemon it runs.

    k8s_consistency_test.py --source DIR --ckptscand BIN

Reads the kustomize base's YAML (PyYAML, Debian python3-yaml) and its ckptscand.toml (tomllib),
and the daemon's flags and defaults from `ckptscand --help`. Checks: every config key and command
line flag (base and overlays) is a ckptscand flag, and the daemon itself accepts the config file;
ports agree between the config, the container, the probes, the Services and the NetworkPolicy;
selectors select the pod template; the grace period outlasts preStop + drain; the liveness
budget outlasts the drain; resources fit max-running workers at --worker-memory; the pod is
hardened; paths in the config lie on the mounted volumes; the shipped rules are the repository's.
Needs no cluster and no kubectl. Exit 0 pass, 1 fail, 77 skipped (reason printed).
"""
import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python < 3.11
    print("SKIPPED: Python's tomllib (3.11+) is missing; Debian 12's python3 has it")
    sys.exit(77)
try:
    import yaml
except ImportError:
    print("SKIPPED: PyYAML is missing; install Debian's python3-yaml (scripts/setup.sh does)")
    sys.exit(77)

failures = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)
    return ok


def size_bytes(text):
    """'8G', '512Mi', '16896Mi', '2Gi' -> bytes (daemon suffixes are binary, as Kubernetes' Xi)."""
    m = re.fullmatch(r"(\d+)\s*([KMGT]?)(i?)B?", str(text))
    if not m:
        raise ValueError(f"not a size: {text!r}")
    return int(m.group(1)) * 1024 ** " KMGT".index(m.group(2) or " ")


def cpu_cores(text):
    text = str(text)
    return int(text[:-1]) / 1000 if text.endswith("m") else float(text)


def help_flags(ckptscand):
    out = subprocess.run([ckptscand, "--help"], capture_output=True, text=True, check=True).stdout
    flags, defaults = set(), {}
    for m in re.finditer(r"^\s+(?:-\w,)?--([a-z][a-z0-9-]*)(.*)$", out, re.M):
        flags.add(m.group(1))
        # "--drain-seconds FLOAT:FLOAT in [0 - 86400]=30   description": the default ends the
        # part before the description (two or more spaces).
        d = re.search(r"=(\S+)$", re.split(r"\s{2,}", m.group(2).strip())[0])
        if d:
            defaults[m.group(1)] = d.group(1)
    return flags, defaults


def host_port(value):
    return int(str(value).rsplit(":", 1)[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--ckptscand", required=True)
    args = ap.parse_args()
    src = Path(args.source)
    base = src / "deploy/kubernetes/base"

    objs = {}
    for f in sorted(base.glob("*.yaml")):
        if f.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(f.read_text()):
            if doc:
                objs[(doc["kind"], doc["metadata"]["name"])] = doc
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    toml_text = (base / "ckptscand.toml").read_text()
    config = tomllib.loads(toml_text)
    flags, defaults = help_flags(args.ckptscand)
    print(f"ckptscand --help: {len(flags)} flags; defaults {defaults}")

    # --- flags and config keys are the daemon's
    unknown = sorted(set(config) - flags)
    check(not unknown, f"every ckptscand.toml key is a ckptscand flag (unknown: {unknown})")
    r = subprocess.run([args.ckptscand, "--config", str(base / "ckptscand.toml"), "--version"],
                       capture_output=True, text=True)
    check(r.returncode == 0, f"ckptscand --config base/ckptscand.toml accepts the file "
          f"(exit {r.returncode} {r.stderr.strip()})")

    dep = objs[("Deployment", "ckptscand")]
    pod = dep["spec"]["template"]["spec"]
    (ctr,) = [c for c in pod["containers"] if c["name"] == "ckptscand"]
    argv = ctr.get("command", []) + ctr.get("args", [])
    check(argv[:1] == ["/usr/local/bin/ckptscand"], f"the container runs the installed ckptscand ({argv[:1]})")
    i = argv.index("--config") if "--config" in argv else -1
    check(i > 0 and argv[i + 1] == "/etc/ckptscan/config/ckptscand.toml",
          "the container passes --config /etc/ckptscan/config/ckptscand.toml")
    for a in argv[1:]:
        if a.startswith("--"):
            check(a[2:].split("=")[0] in flags, f"container flag {a} is a ckptscand flag")
    for overlay in sorted((src / "deploy/kubernetes/overlays").glob("*/kustomization.yaml")):
        for flag in re.findall(r"value:\s*(--[a-z-]+)", overlay.read_text()):
            check(flag[2:] in flags, f"{overlay.parent.name} overlay flag {flag} is a ckptscand flag")

    # --- ports
    cports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
    grpc_port, health_port = host_port(config["tcp"]), host_port(config["health-tcp"])
    check(cports.get("grpc") == grpc_port, f"container port grpc {cports.get('grpc')} = config tcp {grpc_port}")
    check(cports.get("health") == health_port,
          f"container port health {cports.get('health')} = config health-tcp {health_port}")
    check(config["tcp"].startswith("0.0.0.0:") and config["health-tcp"].startswith("0.0.0.0:"),
          "tcp and health-tcp listen on all pod addresses (not loopback)")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        p = ctr.get(probe, {})
        check("grpc" in p and p["grpc"]["port"] == health_port,
              f"{probe} is a native grpc probe on the health port {health_port}")
        svc = p.get("grpc", {}).get("service", "")
        check(svc in ("", "ckptscan.v1.Scanner", "ckptscan.v1.Admin"),
              f"{probe} asks for a service the daemon reports ({svc!r})")
    for name in ("ckptscand", "ckptscand-headless"):
        s = objs[("Service", name)]["spec"]
        ports = s["ports"]
        check(all(p["targetPort"] in ("grpc", grpc_port) and p["port"] == grpc_port for p in ports),
              f"Service {name} exposes the gRPC port {grpc_port} only")
        check(health_port not in [p["port"] for p in ports], f"Service {name} does not expose health")
    check(objs[("Service", "ckptscand-headless")]["spec"].get("clusterIP") == "None",
          "the headless Service has clusterIP: None")
    check(objs[("Service", "ckptscand")]["spec"].get("type", "ClusterIP") == "ClusterIP",
          "the other Service is a ClusterIP")
    np_ = objs[("NetworkPolicy", "ckptscand")]["spec"]
    check(set(np_.get("policyTypes", [])) == {"Ingress", "Egress"} and np_.get("egress") in ([], None),
          "NetworkPolicy: Ingress and Egress policed, no egress rule (no egress at all)")
    ing_ports = {p["port"] for rule in np_["ingress"] for p in rule.get("ports", [])}
    metrics_port = int(config.get("metrics-port", 0))
    allowed = {grpc_port, health_port} | ({metrics_port} if metrics_port else set())
    check(all(rule.get("ports") for rule in np_["ingress"]) and ing_ports == allowed,
          f"NetworkPolicy ingress only to the gRPC, health and metrics ports ({sorted(ing_ports)})")
    if metrics_port:
        check(cports.get("metrics") == metrics_port,
              f"container port metrics {cports.get('metrics')} = config metrics-port {metrics_port}")
        check(config.get("metrics-address") == "0.0.0.0",
              "metrics-address is the pod's addresses, so the cluster's scraper reaches it")

    # --- labels and selectors
    tmpl_labels = dep["spec"]["template"]["metadata"]["labels"]
    sel = dep["spec"]["selector"]["matchLabels"]
    check(sel.items() <= tmpl_labels.items(), "the Deployment's selector selects its pod template")
    for kind, name, s in [("Service", "ckptscand", objs[("Service", "ckptscand")]["spec"]["selector"]),
                          ("Service", "ckptscand-headless",
                           objs[("Service", "ckptscand-headless")]["spec"]["selector"]),
                          ("PodDisruptionBudget", "ckptscand",
                           objs[("PodDisruptionBudget", "ckptscand")]["spec"]["selector"]["matchLabels"]),
                          ("NetworkPolicy", "ckptscand", np_["podSelector"]["matchLabels"])]:
        check(s == sel, f"{kind} {name} selects exactly the Deployment's pods")
    for tsc in pod.get("topologySpreadConstraints", []):
        check(tsc["labelSelector"]["matchLabels"] == sel, "topology spread selects the Deployment's pods")
    common = {k: v for entry in kustomization.get("labels", []) for k, v in entry["pairs"].items()}
    check(all(e.get("includeSelectors") for e in kustomization.get("labels", [])),
          f"the common labels {common} go into selectors too (one app per selector)")
    hpa = objs[("HorizontalPodAutoscaler", "ckptscand")]
    ref = hpa["spec"]["scaleTargetRef"]
    check(hpa["apiVersion"] == "autoscaling/v2" and ref["kind"] == "Deployment" and ref["name"] == "ckptscand",
          "the HPA (autoscaling/v2) scales the Deployment")
    check(any(m["type"] == "Resource" and m["resource"]["name"] == "cpu" for m in hpa["spec"]["metrics"]),
          "the HPA scales on CPU")
    check("replicas" not in dep["spec"], "the Deployment leaves replicas to the HPA")
    check(hpa["spec"]["minReplicas"] >= 2, "at least two replicas (the PDB can then allow one down)")

    # --- shutdown: grace > preStop + drain + 1 s, liveness outlasts the drain
    drain = float(config.get("drain-seconds", defaults.get("drain-seconds", 30)))
    check(drain == float(defaults.get("drain-seconds", drain)),
          f"drain-seconds {drain} is the daemon's default {defaults.get('drain-seconds')}")
    pre = ctr.get("lifecycle", {}).get("preStop", {})
    pre_s = 0.0
    if "exec" in pre and Path(pre["exec"]["command"][0]).name == "sleep":
        pre_s = float(pre["exec"]["command"][1])
    elif "sleep" in pre:
        pre_s = float(pre["sleep"]["seconds"])
    grace = pod["terminationGracePeriodSeconds"]
    check(grace > pre_s + drain + 1,
          f"terminationGracePeriodSeconds {grace} > preStop {pre_s} + drain {drain} + 1")
    live = ctr["livenessProbe"]
    check(live.get("periodSeconds", 10) * live.get("failureThreshold", 3) > drain,
          "the liveness budget outlasts the drain (health is NOT_SERVING while draining)")
    age = float(config.get("max-connection-age", defaults.get("max-connection-age")))
    check(age == float(defaults["max-connection-age"]),
          f"max-connection-age {age} is the daemon's default {defaults['max-connection-age']}")

    # --- resources: max-running workers at --worker-memory fit the limit
    res = ctr["resources"]
    running = int(config["max-running"])
    wmem = size_bytes(config.get("worker-memory", defaults.get("worker-memory")))
    check(wmem == size_bytes(defaults["worker-memory"]), "worker-memory is the daemon's default (8G)")
    limit = size_bytes(res["limits"]["memory"])
    facts = size_bytes(config.get("facts-memory", defaults.get("facts-memory")))
    check(limit >= running * wmem + facts + 256 * 2**20,
          f"memory limit {res['limits']['memory']} >= {running} workers x {wmem >> 30} GiB + "
          f"decode memory {facts >> 20} MiB + daemon")
    check(cpu_cores(res["requests"]["cpu"]) >= running and cpu_cores(res["limits"]["cpu"]) >= running,
          f"CPU request and limit cover max-running = {running} jobs (one core each)")
    check("max-queued" in config and int(config["max-queued"]) == 4 * running,
          "max-queued is the daemon's rule, 4 per running slot, spelt out")

    # --- hardening
    psc = pod["securityContext"]
    check(psc.get("runAsNonRoot") is True and psc.get("runAsUser", 0) != 0,
          "the pod runs as a non-root uid")
    check(psc.get("seccompProfile", {}).get("type") == "RuntimeDefault", "seccompProfile RuntimeDefault")
    check(pod.get("automountServiceAccountToken") is False, "no service account token mounted")
    for c in pod.get("initContainers", []) + pod["containers"]:
        sc = c.get("securityContext", {})
        check(sc.get("allowPrivilegeEscalation") is False and sc.get("readOnlyRootFilesystem") is True
              and sc.get("capabilities", {}).get("drop") == ["ALL"] and not sc.get("privileged"),
              f"container {c['name']}: no privilege escalation, read-only root, capabilities ALL dropped")
        check(":latest" not in c["image"], f"container {c['name']} does not use :latest")
        check("limits" in c.get("resources", {}), f"container {c['name']} has resource limits")

    # --- volumes and paths
    vols = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: vols[m["volumeName"] if "volumeName" in m else m["name"]]
              for m in ctr["volumeMounts"]}
    for path in ("/run/ckptscan", "/var/lib/ckptscan", "/tmp"):
        check(path in mounts and "emptyDir" in mounts[path], f"{path} is an emptyDir")

    def mounted(path):
        return next((mp for mp in mounts if path.startswith(mp.rstrip("/") + "/")), None)

    for key in ("socket", "state-dir", "tls-cert", "tls-key", "tls-client-ca", "signing-key",
                "rules-overlay"):
        check(key in config and mounted(config[key]) is not None,
              f"config {key} = {config.get(key)} lies on a mounted volume")
    check(mounted(config["socket"]) == "/run/ckptscan" and config["socket"].count("/") > 3,
          "the socket is in a subdirectory of /run/ckptscan (the daemon must own its directory)")
    check(mounted(config["state-dir"]) == "/var/lib/ckptscan" and config["state-dir"] != "/var/lib/ckptscan",
          "the state dir is a subdirectory of /var/lib/ckptscan (the daemon must own it)")
    key_vol = mounts[mounted(config["signing-key"])]
    check("emptyDir" in key_vol and key_vol["emptyDir"].get("medium") == "Memory",
          "the signing key's copy lives on a tmpfs emptyDir")
    tls_vol = mounts[mounted(config["tls-cert"])]
    check(tls_vol.get("secret", {}).get("secretName") == "ckptscand-tls", "TLS files come from Secret ckptscand-tls")
    init_cmd = " ".join(" ".join(c.get("command", [])) for c in pod.get("initContainers", []))
    check(config["signing-key"] in init_cmd and "0600" in init_cmd,
          "an init container copies the signing key mode 0600 to where the config says")
    check(any(v.get("secret", {}).get("secretName") == "ckptscand-signing-key" for v in vols.values()),
          "the signing key comes from Secret ckptscand-signing-key")
    cfg_vol = mounts[mounted(config["rules-overlay"])]
    gen = {g["name"]: g for g in kustomization["configMapGenerator"]}
    check(cfg_vol.get("configMap", {}).get("name") in gen and
          Path(config["rules-overlay"]).name in gen[cfg_vol["configMap"]["name"]]["files"],
          "the site rules overlay is in the generated ConfigMap")
    check("rules" not in config,
          "the pod uses the built-in rules (in the image) plus the overlay, not a copy of them")
    escaped = len(json.dumps({"data": {f: (base / f).read_text()
                                       for f in gen["ckptscand-config"]["files"]}}))
    check(escaped < 240 * 1024,
          f"the ConfigMap ({escaped} bytes as JSON) fits client-side apply's 256 KiB annotation")

    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("PASS: deploy/kubernetes agrees with ckptscand")
    return 0


if __name__ == "__main__":
    sys.exit(main())
