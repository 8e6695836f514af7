"""Offline renderer for the subset of kustomize that deploy/k8s uses.

kubectl is not installable from the project's package sources, so the tests render
the overlays with this instead (and compare it with `kubectl kustomize` where kubectl
exists). Supported, with kustomize's semantics:

- ``resources``: YAML files and directories holding a ``kustomization.yaml``;
- ``configMapGenerator`` with ``files`` (``key=path`` or ``path``) and ``behavior``
  create / merge / replace, only with ``generatorOptions.disableNameSuffixHash: true``;
- ``images`` (``name``, ``newName``, ``newTag``) on pod-template containers;
- ``patches`` whose ``patch`` is an inline RFC 6902 JSON patch (add, replace, remove)
  with a ``target`` of ``kind`` and ``name``.

NOTE: anything else raises ``Unsupported``: a kustomization this renderer does not
understand must fail the tests, never render differently from kustomize.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]
KEYS = {"apiVersion", "kind", "resources", "generatorOptions", "configMapGenerator", "images", "patches"}
POD_OWNERS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}


class Unsupported(ValueError):
    """The kustomization uses a feature this renderer does not implement."""


def render(directory: Path) -> list[Obj]:
    """The objects ``kubectl kustomize directory`` would print (in file order)."""
    k = yaml.safe_load((directory / "kustomization.yaml").read_text())
    if set(k) - KEYS:
        raise Unsupported(f"{directory}: unsupported fields {sorted(set(k) - KEYS)}")
    objs: list[Obj] = []
    for ref in k.get("resources", []):
        path = directory / ref
        if path.is_dir():
            objs += render(path)
        else:
            objs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    _generate(directory, k, objs)
    for patch in k.get("patches", []):
        _patch(objs, patch)
    for image in k.get("images", []):
        _set_image(objs, image)
    return objs


def _generate(directory: Path, k: Obj, objs: list[Obj]) -> None:
    no_hash = k.get("generatorOptions") == {"disableNameSuffixHash": True}
    for gen in k.get("configMapGenerator", []):
        if set(gen) - {"name", "files", "behavior"}:
            raise Unsupported(f"configMapGenerator fields {sorted(set(gen) - {'name', 'files', 'behavior'})}")
        data = {}
        for spec in gen["files"]:
            key, _, rel = spec.rpartition("=") if "=" in spec else (Path(spec).name, "", spec)
            data[key] = (directory / rel).read_text()
        behavior = gen.get("behavior", "create")
        found = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == gen["name"]]
        if behavior == "create":
            if not no_hash:
                raise Unsupported("configMapGenerator without generatorOptions.disableNameSuffixHash: true")
            if found:
                raise ValueError(f"ConfigMap {gen['name']} generated twice")
            objs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gen["name"]}, "data": data})
        elif behavior in ("merge", "replace"):
            if len(found) != 1:
                raise ValueError(f"{behavior}: no ConfigMap {gen['name']} to {behavior}")
            found[0]["data"] = {**found[0].get("data", {}), **data} if behavior == "merge" else data
        else:
            raise Unsupported(f"configMapGenerator behavior {behavior!r}")


def _patch(objs: list[Obj], patch: Obj) -> None:
    target = patch.get("target", {})
    if set(patch) != {"target", "patch"} or set(target) != {"kind", "name"}:
        raise Unsupported(f"patch must be an inline JSON patch with target kind+name: {patch}")
    ops = yaml.safe_load(patch["patch"])
    if not isinstance(ops, list):
        raise Unsupported("strategic-merge patches are not supported; use RFC 6902 operations")
    matches = [o for o in objs if o["kind"] == target["kind"] and o["metadata"]["name"] == target["name"]]
    if not matches:
        raise ValueError(f"patch target {target} matches nothing")
    for obj in matches:
        for op in ops:
            _apply_op(obj, op)


def _apply_op(doc: Obj, op: Obj) -> None:
    parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
    parent: Any = doc
    for part in parts[:-1]:
        parent = parent[int(part)] if isinstance(parent, list) else parent[part]
    last = parts[-1]
    kind = op["op"]
    if kind not in ("add", "replace", "remove"):
        raise Unsupported(f"JSON patch op {kind!r}")
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if kind == "add":
            parent.insert(index, copy.deepcopy(op["value"]))
        elif kind == "replace":
            parent[index] = copy.deepcopy(op["value"])
        else:
            del parent[index]
        return
    if kind != "add" and last not in parent:
        raise ValueError(f"JSON patch {kind} of missing path {op['path']}")
    if kind == "remove":
        del parent[last]
    else:
        parent[last] = copy.deepcopy(op["value"])


def _set_image(objs: list[Obj], image: Obj) -> None:
    if set(image) - {"name", "newName", "newTag"}:
        raise Unsupported(f"images fields {sorted(set(image) - {'name', 'newName', 'newTag'})}")
    for obj in objs:
        if obj["kind"] not in POD_OWNERS:
            continue
        spec = obj["spec"]["template"]["spec"]
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            name, _, tag = container["image"].partition(":")
            if "@" in container["image"] or "/" in tag:
                raise Unsupported(f"image reference {container['image']!r}")
            if name == image["name"]:
                new_tag = image.get("newTag", tag)
                container["image"] = image.get("newName", name) + (f":{new_tag}" if new_tag else "")
