"""gslice install-shim: the versioned host folder for the node's containers."""
from __future__ import annotations

import os

import pytest

from gslice import __version__
from gslice.cli import main
from gslice.shim_install import install_shim


@pytest.fixture
def shim(tmp_path):
    path = tmp_path / "build" / "libgslice.so"
    path.parent.mkdir()
    path.write_bytes(b"\x7fELF first build")
    return path


def test_installs_under_the_version_and_points_current(tmp_path, shim):
    prefix = tmp_path / "opt-gslice"
    target = install_shim(prefix, source=shim, version="1.2.3")
    assert target == prefix / "1.2.3" / "lib" / "libgslice.so"
    assert target.read_bytes() == shim.read_bytes()
    assert os.access(target, os.X_OK)
    assert os.readlink(prefix / "current") == "1.2.3"
    assert sorted(p.name for p in (prefix / "1.2.3" / "lib").iterdir()) == ["libgslice.so"]   # no temp left


def test_same_bytes_leave_the_file_in_use_untouched(tmp_path, shim):
    prefix = tmp_path / "p"
    first = install_shim(prefix, source=shim, version="1.0.0")
    inode = first.stat().st_ino
    again = install_shim(prefix, source=shim, version="1.0.0")
    assert again.stat().st_ino == inode


def test_changed_bytes_are_renamed_in_not_written_in_place(tmp_path, shim):
    prefix = tmp_path / "p"
    first = install_shim(prefix, source=shim, version="1.0.0")
    with open(first, "rb") as mapped:   # a process holding the old library
        shim.write_bytes(b"\x7fELF second build")
        second = install_shim(prefix, source=shim, version="1.0.0")
        assert mapped.read() == b"\x7fELF first build"
    assert second.read_bytes() == b"\x7fELF second build"


def test_a_new_version_keeps_the_old_one_and_moves_current(tmp_path, shim):
    prefix = tmp_path / "p"
    install_shim(prefix, source=shim, version="1.0.0")
    install_shim(prefix, source=shim, version="1.1.0")
    assert (prefix / "1.0.0" / "lib" / "libgslice.so").is_file()
    assert os.readlink(prefix / "current") == "1.1.0"


@pytest.mark.parametrize("version", ["", "..", "current", "a/b"])
def test_rejects_versions_that_are_not_folder_names(tmp_path, shim, version):
    with pytest.raises(ValueError, match="cannot name a folder"):
        install_shim(tmp_path, source=shim, version=version)


def test_missing_source_says_where_it_looked(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.so"):
        install_shim(tmp_path, source=tmp_path / "nowhere.so")


def test_cli_installs_the_packaged_shim_under_the_package_version(tmp_path, capsys, monkeypatch, shim):
    monkeypatch.setenv("GSLICE_SHIM_LIBRARY", str(shim))
    assert main(["install-shim", "--prefix", str(tmp_path / "host")]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == str(tmp_path / "host" / __version__ / "lib" / "libgslice.so")
    assert (tmp_path / "host" / __version__ / "lib" / "libgslice.so").read_bytes() == shim.read_bytes()


def test_cli_version(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"gslice {__version__}"

