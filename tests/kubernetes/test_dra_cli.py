"""gslice-dra install-shim (the DaemonSet's init step) and check; the installer itself
(gslice.shim_install) is tested in tests/unit/test_shim_install.py."""
from __future__ import annotations


def test_gslice_dra_install_shim_and_check(tmp_path, capsys, node):
    from gslice.kubernetes.__main__ import main
    source = tmp_path / "libgslice.so"
    source.write_bytes(b"\x7fELF shim")
    args = ["--shim-root", str(tmp_path / "opt"), "--shim-version", "9.9.9", "install-shim", "--source", str(source)]
    assert main(args) == 0
    assert (tmp_path / "opt/9.9.9/lib/libgslice.so").read_bytes() == b"\x7fELF shim"
    inode = (tmp_path / "opt/9.9.9/lib/libgslice.so").stat().st_ino
    assert main(args) == 0   # again: the file in use is left alone
    assert (tmp_path / "opt/9.9.9/lib/libgslice.so").stat().st_ino == inode
    assert "installed: " in capsys.readouterr().out
    # options after the command too, as the DaemonSet's init step writes them
    assert main(["install-shim", "--shim-root", str(tmp_path / "opt2"), "--source", str(source)]) == 0
    from gslice import __version__
    assert (tmp_path / "opt2" / __version__ / "lib/libgslice.so").read_bytes() == b"\x7fELF shim"

    # the plugin's probe: GetInfo on the registration socket
    assert main(["--registry-dir", str(node.config.registry_dir), "check"]) == 0
    assert "gslice.dev: DRAPlugin on " in capsys.readouterr().out
    assert main(["--registry-dir", str(tmp_path), "check"]) == 1


def test_gslice_dra_version_and_help(capsys):
    import pytest
    from gslice import __version__
    from gslice.kubernetes.__main__ import main
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"gslice-dra {__version__}"
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    import re
    options = re.split(r"\n  (?=-)", capsys.readouterr().out.split("options:", 1)[1])
    for flag in ("--node-name", "--plugins-dir", "--cdi-dir", "--state-dir", "--shim-root", "--registry-dir"):
        [entry] = [o for o in options if o.startswith(flag + " ")]
        assert "(default" in entry, entry


def test_every_plugin_flag_is_documented():
    """docs/kubernetes.md lists the plugin's flags; a flag added to the CLI
    and not to the walk-through is one nobody finds."""
    from pathlib import Path
    from gslice.kubernetes.__main__ import build_parser
    parser = build_parser()
    run = next(a for a in parser._subparsers._group_actions if a.dest == "command").choices["run"]
    flags = {s for a in run._actions for s in a.option_strings if s.startswith("--") and s != "--help"}
    docs = (Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md").read_text()
    assert sorted(f for f in flags if f"`{f}" not in docs) == []


def test_install_shim_failure_is_one_line(tmp_path, capsys):
    """The init container's log: what failed and where, not a traceback."""
    from gslice.kubernetes.__main__ import main
    assert main(["install-shim", "--shim-root", str(tmp_path), "--source", str(tmp_path / "nowhere.so")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"gslice-dra: installing the shim under {tmp_path} failed: ") and "nowhere.so" in err
    assert len(err.strip().splitlines()) == 1
    source = tmp_path / "libgslice.so"
    source.write_bytes(b"shim")
    assert main(["install-shim", "--shim-root", str(tmp_path), "--shim-version", "..", "--source", str(source)]) == 1
    assert "cannot name a folder" in capsys.readouterr().err
