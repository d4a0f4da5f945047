"""deploy/node/Containerfile cannot be built here (no image registry), so
this checks what can be checked without one: the recipe parses, every file
it copies exists (the wheel pattern matches the wheel `python -m build`
makes), its base is a slim Python image, and its entrypoint does what the
image promises when run with the wheel's gslice."""
from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from packaging_harness import ROOT, project_version, running_tokend

pytestmark = pytest.mark.packaging

NODE = ROOT / "deploy" / "node"
RECIPE = NODE / "Containerfile"
ENTRYPOINT = NODE / "entrypoint.sh"
KNOWN = {"ARG", "FROM", "COPY", "RUN", "ENV", "ENTRYPOINT", "CMD", "USER", "WORKDIR", "LABEL", "EXPOSE"}


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with comments dropped and `\\` continuations joined."""
    joined = re.sub(r"\\\n", " ", "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#")))
    result = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            result.append((word.upper(), rest.strip()))
    return result


def test_recipe_parses_and_uses_only_known_instructions():
    parsed = instructions(RECIPE.read_text())
    assert parsed and {word for word, _ in parsed} <= KNOWN, parsed
    froms = [rest for word, rest in parsed if word == "FROM"]
    args = dict(rest.split("=", 1) for word, rest in parsed if word == "ARG" and "=" in rest)
    assert len(froms) == 1
    base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], froms[0])
    # A slim Python base with a pinned tag, never :latest.
    assert re.fullmatch(r"(docker\.io/library/)?python:3\.\d+-slim(-\w+)?", base), base
    for word in ("ENTRYPOINT", "CMD"):
        json.loads(next(rest for w, rest in parsed if w == word))   # exec form


def test_every_copied_file_exists(wheel_path):
    for word, rest in instructions(RECIPE.read_text()):
        if word != "COPY":
            continue
        *sources, _dest = shlex.split(rest)
        for source in sources:
            if source.startswith("dist/"):
                # What `python -m build` writes to dist/.
                assert fnmatch.fnmatch(f"dist/{wheel_path.name}", source), (source, wheel_path.name)
            else:
                assert (ROOT / source).is_file(), source


def test_entrypoint_is_executable_posix_sh():
    assert os.access(ENTRYPOINT, os.X_OK)
    assert ENTRYPOINT.read_text().startswith("#!/bin/sh\n")
    subprocess.run(["sh", "-n", str(ENTRYPOINT)], check=True)


def test_entrypoint_with_the_wheels_gslice(installed_venv, tmp_path):
    """As in the image: gslice from the wheel on PATH; the shim is copied to
    the versioned host folder, then the role runs."""
    venv, env = installed_venv
    host = tmp_path / "host-opt-gslice"
    run_env = {**env, "GSLICE_SHIM_PREFIX": str(host)}
    r = subprocess.run(["/bin/sh", str(ENTRYPOINT), "--version"], env=run_env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"gslice {project_version()}"
    installed = host / project_version() / "lib" / "libgslice.so"
    assert r.stderr.strip() == str(installed)
    packaged = subprocess.run(["gslice", "lib-path"], env=env, capture_output=True, text=True).stdout.strip()
    assert installed.read_bytes() == Path(packaged).read_bytes()
    assert os.readlink(host / "current") == project_version()
    # The preloadable copy on the host loads on its own.
    r = subprocess.run(["/bin/true"], env={"LD_PRELOAD": str(installed), "LD_BIND_NOW": "1"},
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == ""

    r = subprocess.run(["/bin/sh", str(ENTRYPOINT), "kubelet-plugin"], env=env, capture_output=True, text=True)
    assert r.returncode == 2 and "no Kubernetes kubelet plugin" in r.stderr

    # The tokend role starts the daemon (stopped as soon as its sockets exist).
    with running_tokend(["/bin/sh", str(ENTRYPOINT), "tokend", "--fake-gpu", "GPU-fake-node,fake,1073741824",
                         "--state-dir", str(tmp_path / "state")], env, tmp_path / "tokend.log") as sockets:
        assert (sockets / "client.sock").exists()
