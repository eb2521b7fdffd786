#!/usr/bin/env python3
"""What the manifests must agree on with the image and with cifar's flags.

Offline and without Kubernetes: it reads the YAML (PyYAML reads it as kubectl
does, YAML 1.1) and deploy/container/Dockerfile. The schema itself is checked
by validate.sh (npm packages, so the network once; //deploy/kubernetes:validate_test).
"""

import os
import re
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
COMPONENTS = ("cpu-only", "eks-spot", "gke-spot")


def load(path):
    with open(os.path.join(HERE, path)) as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def find(docs, kind, name):
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    if len(matches) != 1:
        raise AssertionError(f"expected one {kind}/{name}, found {len(matches)}")
    return matches[0]


def flags(container):
    """--name=value arguments as a dict (the manifests use only that form)."""
    result = {}
    for arg in container.get("args", []):
        if not arg.startswith("--"):
            raise AssertionError(f"argument {arg!r} of {container['name']} is not --name[=value]")
        name, _, value = arg[2:].partition("=")
        result[name] = value
    return result


def dockerfile():
    with open(os.path.join(ROOT, "deploy/container/Dockerfile")) as f:
        return f.read()


def mount_of(container, volume):
    mounts = [m for m in container.get("volumeMounts", []) if m["name"] == volume]
    if len(mounts) != 1:
        raise AssertionError(f"{container['name']} mounts volume {volume} {len(mounts)} times")
    return mounts[0]


def volume_mounted_at(pod, container, path):
    """The volume whose mount in `container` holds `path`, and that mount."""
    best = None
    for mount in container.get("volumeMounts", []):
        prefix = mount["mountPath"].rstrip("/") + "/"
        if path.startswith(prefix) and (best is None or len(prefix) > len(best["mountPath"])):
            best = mount
    if best is None:
        raise AssertionError(f"{path} is on no volume of {container['name']}")
    volumes = [v for v in pod["volumes"] if v["name"] == best["name"]]
    return volumes[0], best


class Manifests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.controller_docs = load("controller.yaml")
        cls.worker_docs = load("worker.yaml")
        cls.docs = cls.controller_docs + cls.worker_docs
        cls.controller = find(cls.docs, "Deployment", "elastic-controller")
        cls.worker = find(cls.docs, "Deployment", "elastic-worker")
        cls.service = find(cls.docs, "Service", "elastic-controller")
        cls.controller_pod = cls.controller["spec"]["template"]["spec"]
        cls.worker_pod = cls.worker["spec"]["template"]["spec"]
        cls.controller_container = cls.controller_pod["containers"][0]
        cls.worker_container = cls.worker_pod["containers"][0]
        cls.controller_flags = flags(cls.controller_container)
        cls.worker_flags = flags(cls.worker_container)

    def test_ports_are_the_images_exposed_ports(self):
        exposed = re.search(r"^EXPOSE\s+(.+)$", dockerfile(), re.M)
        self.assertIsNotNone(exposed, "no EXPOSE in deploy/container/Dockerfile")
        exposed = sorted(int(p) for p in exposed.group(1).split())
        ports = self.controller_container["ports"]
        container_ports = {p["name"]: p["containerPort"] for p in ports}
        self.assertEqual(sorted(container_ports.values()), exposed)
        self.assertEqual(container_ports["head"], int(self.controller_flags["port"]))
        # The controller listens on --port + 1, and workers reach it through the Service.
        self.assertEqual(container_ports["controller"], int(self.controller_flags["port"]) + 1)
        service_targets = {p["targetPort"] for p in self.service["spec"]["ports"]}
        self.assertLessEqual({"head", "controller"}, service_targets)
        self.assertEqual(container_ports["metrics"], int(self.controller_flags["metrics-port"]))
        for port in self.service["spec"]["ports"]:
            self.assertIn(port["targetPort"], container_ports, "targetPort names a container port")
            self.assertEqual(port["port"], container_ports[port["targetPort"]])

    def test_controller_listens_where_the_service_reaches_it(self):
        self.assertIn("controller-only", self.controller_flags)
        self.assertEqual(self.controller_flags["listen"], "0.0.0.0")
        self.assertEqual(self.controller_flags["metrics-address"], "0.0.0.0")

    def test_service_selects_the_controller_only(self):
        selector = self.service["spec"]["selector"]
        controller_labels = self.controller["spec"]["template"]["metadata"]["labels"]
        worker_labels = self.worker["spec"]["template"]["metadata"]["labels"]
        self.assertLessEqual(selector.items(), controller_labels.items())
        self.assertFalse(selector.items() <= worker_labels.items())
        pdb = find(self.docs, "PodDisruptionBudget", "elastic-controller")
        self.assertEqual(pdb["spec"]["selector"]["matchLabels"], selector)

    def test_deployment_selectors_match_their_pods(self):
        for deployment in (self.controller, self.worker):
            labels = deployment["spec"]["template"]["metadata"]["labels"]
            match = deployment["spec"]["selector"]["matchLabels"]
            self.assertLessEqual(match.items(), labels.items(), deployment["metadata"]["name"])

    def test_one_controller_never_two(self):
        self.assertEqual(self.controller["spec"]["replicas"], 1)
        self.assertEqual(self.controller["spec"]["strategy"]["type"], "Recreate")

    def test_state_and_checkpoints_are_on_the_claim(self):
        claim = find(self.docs, "PersistentVolumeClaim", "elastic-controller-state")
        for flag in ("state-dir", "checkpoint-dir", "run-dir"):
            volume, mount = volume_mounted_at(
                self.controller_pod, self.controller_container, self.controller_flags[flag]
            )
            self.assertEqual(
                volume.get("persistentVolumeClaim", {}).get("claimName"),
                claim["metadata"]["name"],
                f"--{flag} is not on the claim",
            )
            self.assertFalse(mount.get("readOnly", False))

    def test_workers_join_through_the_service(self):
        host, _, port = self.worker_flags["join"].partition(":")
        self.assertEqual(host, self.service["metadata"]["name"])
        head = [p for p in self.service["spec"]["ports"] if p["name"] == "head"][0]
        self.assertEqual(int(port), head["port"])
        self.assertEqual(self.worker_flags["workers"], "1")

    def test_one_gpu_per_worker(self):
        limits = self.worker_container["resources"]["limits"]
        self.assertEqual(str(limits["nvidia.com/gpu"]), "1")

    def test_token_is_the_secret_copied_to_a_private_file(self):
        uid = re.search(r"--uid\s+(\d+)", dockerfile()).group(1)
        self.assertRegex(dockerfile(), rf"(?m)^USER {uid}\b", "the image runs as its user")
        for pod, container, args in (
            (self.controller_pod, self.controller_container, self.controller_flags),
            (self.worker_pod, self.worker_container, self.worker_flags),
        ):
            with self.subTest(container=container["name"]):
                context = pod["securityContext"]
                # The image's user, and the group the kubelet gives the
                # Secret's files (so that user can read them).
                self.assertEqual(str(context["runAsUser"]), uid)
                self.assertEqual(str(context["fsGroup"]), uid)
                token = args["token-file"]
                volume, mount = volume_mounted_at(pod, container, token)
                self.assertIn("emptyDir", volume, "--token-file must be the private copy")
                self.assertTrue(mount.get("readOnly"))
                # The init container writes exactly that file, mode 0400, from the Secret.
                init = [c for c in pod["initContainers"] if c["name"] == "token"][0]
                command = init["command"]
                self.assertEqual(command[:3], ["install", "-m", "0400"])
                source, destination = command[3], command[4]
                copy_volume, _ = volume_mounted_at(pod, init, destination)
                self.assertEqual(copy_volume["name"], volume["name"])
                self.assertEqual(
                    os.path.relpath(destination, mount_of(init, volume["name"])["mountPath"]),
                    os.path.relpath(token, mount["mountPath"]),
                )
                secret_volume, secret_mount = volume_mounted_at(pod, init, source)
                secret = secret_volume["secret"]
                self.assertEqual(secret["secretName"], "elastic-token")
                self.assertEqual(secret["defaultMode"], 0o400)
                self.assertTrue(secret_mount.get("readOnly"))
                key = os.path.relpath(source, secret_mount["mountPath"])
                self.assertIn({"key": "token", "path": key}, secret["items"])

    def test_grace_period_covers_the_drain(self):
        # The agent waits --drain-timeout + 60 s for a draining worker.
        drain = float(self.worker_flags["drain-timeout"])
        self.assertEqual(drain, float(self.controller_flags["drain-timeout"]))
        self.assertGreaterEqual(self.worker_pod["terminationGracePeriodSeconds"], drain + 60)
        self.assertIn("terminationGracePeriodSeconds", self.controller_pod)

    def test_kustomization_lists_every_manifest_and_component(self):
        kustomization = load("kustomization.yaml")[0]
        manifests = sorted(
            f for f in os.listdir(HERE) if f.endswith(".yaml") and f != "kustomization.yaml"
        )
        self.assertEqual(sorted(kustomization["resources"]), manifests)
        self.assertEqual(sorted(os.listdir(os.path.join(HERE, "components"))), list(COMPONENTS))

    def test_components_patch_existing_objects(self):
        names = {(d["kind"], d["metadata"]["name"]) for d in self.docs}
        for component in COMPONENTS:
            with self.subTest(component=component):
                spec = load(f"components/{component}/kustomization.yaml")[0]
                self.assertEqual(spec["kind"], "Component")
                for patch in spec["patches"]:
                    if "path" in patch:
                        target = load(f"components/{component}/{patch['path']}")[0]
                        kind, name = target["kind"], target["metadata"]["name"]
                    else:
                        kind, name = patch["target"]["kind"], patch["target"]["name"]
                    self.assertIn((kind, name), names)

    def test_spot_components_keep_the_controller_off_spot_nodes(self):
        def text(component):
            directory = os.path.join(HERE, "components", component)
            return "".join(open(os.path.join(directory, f)).read() for f in os.listdir(directory))

        gke = load("components/gke-spot/controller-on-demand.yaml")[0]
        terms = gke["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        self.assertIn(
            {"key": "cloud.google.com/gke-spot", "operator": "DoesNotExist"},
            terms[0]["matchExpressions"],
        )
        self.assertIn('cloud.google.com/gke-spot: "true"', text("gke-spot"))
        eks = load("components/eks-spot/controller-on-demand.yaml")[0]
        self.assertEqual(
            eks["spec"]["template"]["spec"]["nodeSelector"],
            {"eks.amazonaws.com/capacityType": "ON_DEMAND"},
        )
        self.assertIn("eks.amazonaws.com/capacityType: SPOT", text("eks-spot"))


if __name__ == "__main__":
    unittest.main()
