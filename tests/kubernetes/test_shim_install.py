"""The init step that puts libgslice.so into /opt/gslice/<version>/lib."""
from __future__ import annotations

from gslice.kubernetes.shim_install import install_shim


def test_shim_install_never_rewrites_a_file_in_place(tmp_path):
    source = tmp_path / "libgslice.so"
    source.write_bytes(b"v1")
    target, written = install_shim(source, tmp_path / "opt" / "0.1.0" / "lib")
    assert written and target.read_bytes() == b"v1"
    inode = target.stat().st_ino
    assert install_shim(source, target.parent) == (target, False) and target.stat().st_ino == inode
    with open(target, "rb") as mapped:  # a running container's view of the old file
        source.write_bytes(b"v2")
        assert install_shim(source, target.parent) == (target, True)
        assert target.read_bytes() == b"v2" and target.stat().st_ino != inode
        assert mapped.read() == b"v1"


def test_gslice_dra_install_shim_and_check(tmp_path, capsys, node):
    from gslice.kubernetes.__main__ import main
    source = tmp_path / "libgslice.so"
    source.write_bytes(b"\x7fELF shim")
    args = ["--shim-root", str(tmp_path / "opt"), "--shim-version", "9.9.9", "install-shim", "--source", str(source)]
    assert main(args) == 0
    assert (tmp_path / "opt/9.9.9/lib/libgslice.so").read_bytes() == b"\x7fELF shim"
    assert main(args) == 0
    assert "already installed" in capsys.readouterr().out

    # the plugin's probe: GetInfo on the registration socket
    assert main(["--registry-dir", str(node.config.registry_dir), "check"]) == 0
    assert "gslice.dev: DRAPlugin on " in capsys.readouterr().out
    assert main(["--registry-dir", str(tmp_path), "check"]) == 1
