"""One version, printed by every command (it comes from gslice.__version__)."""
from __future__ import annotations

import pytest

from gslice import __version__
from gslice.cli import main as gslice_main
from gslice.kubernetes.__main__ import main as dra_main
from gslice.tokend.__main__ import main as tokend_main


@pytest.mark.parametrize("entry", [gslice_main, tokend_main, dra_main], ids=["gslice", "gslice-tokend", "gslice-dra"])
def test_every_command_prints_the_one_version(entry, capsys):
    with pytest.raises(SystemExit) as exit_:
        entry(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip().endswith(f" {__version__}")
