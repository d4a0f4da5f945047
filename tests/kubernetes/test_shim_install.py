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
