"""Every gslice command line that the deployment files and the docs give to a
user parses with the real command-line parsers (gslice, gslice-tokend,
gslice-dra): the container commands and probes of deploy/kubernetes/*.yaml,
the node image's RUN/CMD and entrypoint, the systemd unit's ExecStart, and
the literal commands in the docs' shell blocks.

A manifest that passes `kubernetes-validate` can still run a command its
program refuses (the DaemonSet's init step once ran `gslice-dra install-shim
--shim-root /opt/gslice`, which argparse refused): only the parsers can say."""
from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PROGRAMS = ("gslice", "gslice-tokend", "gslice-dra")


def _parser(program: str) -> argparse.ArgumentParser:
    if program == "gslice":
        from gslice.cli import build_parser
        return build_parser()
    if program == "gslice-dra":
        from gslice.kubernetes.__main__ import build_parser
        return build_parser()
    from gslice.tokend.__main__ import add_arguments
    parser = argparse.ArgumentParser(prog="gslice-tokend")
    add_arguments(parser)
    return parser


def check_parses(argv: list[str], where: str) -> argparse.Namespace | None:
    """Parses argv with its program's parser; fails with argparse's message.
    None for --help / --version (they exit 0 before a namespace exists)."""
    program = Path(argv[0]).name
    assert program in PROGRAMS, f"{where}: {argv[0]!r} is not one of {PROGRAMS}"
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            args = _parser(program).parse_args(argv[1:])
    except SystemExit as exc:
        assert exc.code == 0, f"{where}: {shlex.join(argv)} is refused by {program}: {stderr.getvalue().strip()}"
        return None
    return args


# ------------------------------------------------------------ the sources

def _manifest_commands():
    for path in sorted((DEPLOY / "kubernetes").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") not in ("DaemonSet", "Deployment", "Pod"):
                continue
            spec = doc["spec"]["template"]["spec"] if "template" in doc["spec"] else doc["spec"]
            for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
                where = f"{path.relative_to(ROOT)} {doc['metadata']['name']}/{container['name']}"
                argv = [*container.get("command", []), *container.get("args", [])]
                if argv and Path(argv[0]).name in PROGRAMS:
                    yield pytest.param(argv, id=f"{where} command")
                for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                    command = ((container.get(probe) or {}).get("exec") or {}).get("command")
                    if command:
                        yield pytest.param(command, id=f"{where} {probe}")


def _entrypoint_roles(argv: list[str]) -> list[str]:
    """What deploy/node/entrypoint.sh runs for `gslice-node ARGS`."""
    role, rest = (argv[0], argv[1:]) if argv else ("tokend", [])
    if role == "tokend":
        return ["gslice", "tokend", *rest]
    if role == "kubelet-plugin":
        return ["gslice-dra", *rest]
    return ["gslice", role, *rest]


def _shell_lines(text: str):
    """Logical lines of shell text: continuations joined, comments dropped."""
    for line in re.sub(r"\\\n\s*", " ", text).splitlines():
        line = line.split(" #", 1)[0].strip().rstrip("&;").strip()
        if line and not line.startswith("#"):
            yield line


def _gslice_words(line: str) -> list[str] | None:
    """The gslice command in a shell line (after `exec`, `VAR=... `, `;`), else None."""
    for part in re.split(r";|&&|\|\|", line):
        try:
            words = shlex.split(part)
        except ValueError:
            continue
        while words and (words[0] in ("exec", "then", "do") or re.fullmatch(r"\w+=\S*", words[0])):
            words = words[1:]
        if words and words[0] == "kubectl" and "--" in words:   # kubectl exec ... -- gslice ...
            words = words[words.index("--") + 1:]
        if words and Path(words[0]).name in PROGRAMS:
            return words
    return None


def _node_image_commands():
    containerfile = (DEPLOY / "node" / "Containerfile").read_text()
    cmd = re.search(r"^CMD (\[.*\])$", containerfile, re.M)
    yield pytest.param(_entrypoint_roles(yaml.safe_load(cmd.group(1))), id="deploy/node/Containerfile CMD")
    run_text = "\n".join(re.findall(r"^RUN ((?:.*\\\n)*.*)$", containerfile, re.M))
    for line in _shell_lines(run_text):
        words = _gslice_words(line)
        if words:
            yield pytest.param(words, id=f"deploy/node/Containerfile RUN {shlex.join(words)}")
    for line in _shell_lines((DEPLOY / "node" / "entrypoint.sh").read_text()):
        words = _gslice_words(line)
        if words:
            # "$@" and "$role" are the image's arguments: checked through the CMD above.
            words = [w.replace("$GSLICE_SHIM_PREFIX", "/opt/gslice") for w in words
                     if w not in ("$@", "$role") and not re.match(r"\d?>", w)]
            if len(words) == 1:
                continue
            yield pytest.param(words, id=f"deploy/node/entrypoint.sh {shlex.join(words)}")


def _systemd_commands():
    for path in sorted((DEPLOY / "systemd").glob("*.service")):
        for line in path.read_text().splitlines():
            if line.startswith("ExecStart="):
                words = shlex.split(line[len("ExecStart="):].replace("%i", "0"))
                yield pytest.param(words, id=f"{path.relative_to(ROOT)} ExecStart")


def _doc_commands():
    """Literal commands in ```sh blocks; synopsis lines ([--opt], NAME, ...) are not literal."""
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"^```(?:sh|bash|console)\n(.*?)^```", path.read_text(), re.M | re.S):
            for line in _shell_lines(block):
                if re.search(r"\[|\.\.|\bNAME\b|\|", line):
                    continue
                words = _gslice_words(line)
                if words:
                    yield pytest.param(words, id=f"{path.relative_to(ROOT)}: {shlex.join(words)}")


COMMANDS = [*_manifest_commands(), *_node_image_commands(), *_systemd_commands(), *_doc_commands()]


def test_the_sources_are_found():
    ids = " ".join(p.id for p in COMMANDS)
    for expected in ("install-shim command", "tokend-gpu0 command", "plugin command", "plugin livenessProbe",
                     "Containerfile CMD", "Containerfile RUN gslice --version", "entrypoint.sh gslice install-shim",
                     "ExecStart", "README.md: gslice group create", "docs/kubernetes.md: gslice group ls"):
        assert expected in ids, (expected, ids)


@pytest.mark.parametrize("argv", COMMANDS)
def test_command_line_parses(argv, request):
    check_parses(argv, request.node.callspec.id)


@pytest.mark.parametrize("argv, message", [
    (["gslice-dra", "install-shim", "--prefix", "/opt/gslice"], "unrecognized arguments: --prefix"),
    (["gslice-tokend", "--admin-socket-dir", "/run/gslice/gpu0"], "unrecognized arguments"),
    (["gslice", "group", "create", "g", "--request", "30%"], "--memory"),
])
def test_a_wrong_command_line_fails(argv, message):
    with pytest.raises(AssertionError, match=message):
        check_parses(argv, "example")


@pytest.mark.parametrize("argv, message", [
    (["gslice-dra", "run", "--memory-reserve", "lots"], "argument --memory-reserve: memory size 'lots'"),
    (["gslice-dra", "run", "--cleanup-interval", "0"], "argument --cleanup-interval: '0' is not a number of seconds"),
])
def test_a_wrong_value_fails(argv, message):
    with pytest.raises(AssertionError, match=message):
        check_parses(argv, "example")


def test_the_systemd_unit_runs_the_gslice_that_the_docs_install():
    """operations.md installs the wheel into a virtual environment; the unit
    runs a fixed path: the install steps must put gslice there."""
    [program] = {Path(p.values[0][0]) for p in _systemd_commands()}
    install = (ROOT / "docs" / "operations.md").read_text().split("## Installing from the wheel", 1)[1]
    install = install.split("\n## ", 1)[0]
    assert str(program) in install, f"the systemd unit runs {program}, which the install steps do not provide"
