"""The CLI's bad input is refused before anything is asked of tokend (usage,
exit 2, one line saying what is accepted), and a reader that goes away
(`gslice watch | head -3`) ends gslice quietly with 141, as SIGPIPE would."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import gslice.cli
from gslice.cli import main


@pytest.fixture
def no_daemon(monkeypatch):
    """Fails the test if a command gets as far as connecting to tokend."""
    def connect(args):
        raise AssertionError("the command asked tokend although its input was bad")
    monkeypatch.setattr(gslice.cli, "_admin", connect)


@pytest.mark.parametrize("argv, message", [
    (["top", "--interval", "-1"], "'-1' is not a number of seconds >= 0"),
    (["top", "--interval", "nan"], "'nan' is not a number of seconds >= 0"),
    (["top", "--interval", "inf"], "'inf' is not a number of seconds >= 0"),
    (["top", "--iterations", "0"], "'0' is not a whole number >= 1"),
    (["watch", "--count", "0"], "'0' is not a whole number >= 1"),
    (["watch", "--count", "-3"], "'-3' is not a whole number >= 1"),
    (["watch", "--count", "two"], "'two' is not a whole number >= 1"),
])
def test_bad_counts_and_intervals_are_usage_errors(argv, message, capsys, no_daemon):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err


def test_interval_zero_and_fractions_are_accepted():
    parser = gslice.cli.build_parser()
    assert parser.parse_args(["top", "--interval", "0"]).interval == 0.0
    assert parser.parse_args(["top", "--interval", "0.25", "--iterations", "1"]).interval == 0.25


def test_group_set_without_a_field_is_refused_and_changes_nothing(capsys, no_daemon):
    assert main(["group", "set", "train"]) == 2
    err = capsys.readouterr().err
    assert "nothing to change" in err and "train" in err
    for flag in ("--request", "--limit", "--memory", "--priority", "--on-daemon-loss", "--rotate-secret"):
        assert flag in err, err


# A stand-in for tokend behind gslice.cli._admin, for commands whose output
# outlasts its reader.
_FAKE_ADMIN = textwrap.dedent("""
    import sys, time
    import gslice.cli
    from gslice.client import Event, Group, GroupStatus, Priority, Status

    class FakeAdmin:
        def __enter__(self): return self
        def __exit__(self, *exc): pass
        def watch(self):
            class Events:
                def __iter__(self):
                    while True:
                        yield Event(time.time(), "group_updated", "g", "", "request 0.1")
                def close(self): pass
            return Events()
        def list_groups(self):   # far more than a pipe holds
            return [Group(f"g{i}", 0.001, 0.001, 1 << 20, Priority.NORMAL) for i in range(2000)]
        def status(self):
            groups = [GroupStatus(group, 0.0, 0, False, 0, 0, "", 0, 0) for group in self.list_groups()]
            return Status("GPU-x", "sim", 1 << 30, 10.0, "", "", 0, [], groups, [], 0.0, 0.0, 0)

    gslice.cli._admin = lambda args: FakeAdmin()
    sys.exit(gslice.cli.main(sys.argv[1:]))
""")


@pytest.mark.parametrize("argv", [["watch"], ["status", "--json"], ["group", "ls", "--json"]])
def test_a_reader_that_goes_away_ends_gslice_quietly(argv):
    process = subprocess.Popen([sys.executable, "-c", _FAKE_ADMIN, *argv], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    process.stdout.readline()   # like `| head -1`
    process.stdout.close()
    try:
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 141, err.decode()
    assert err == b"", err.decode()
