"""Issue 9, finding 6: values that come from tenants (process names) are
printed by `gslice status` / `top` / `watch`: no terminal escape reaches the
operator's terminal; and `gslice run --secret` (visible in ps) is refused."""
from __future__ import annotations

from gslice.cli import main
from gslice.cli_tables import status_text, terminal_safe
from gslice.client import ClientStatus, Status


def _status(process_name: str) -> Status:
    return Status(gpu_uuid="GPU-x", gpu_name="gpu\x1b]0;t\x07", physical_memory=1 << 30, window_seconds=10,
                  holder_client_id="", holder_group="", token_id=0, waiting_client_ids=[], groups=[],
                  clients=[ClientStatus("c1", "g", 42, process_name, False, False, 0, 0.0)], busy_fraction=0.0,
                  now=0.0, decisions=0, state_note="restored\x1b[31m")


def test_terminal_escapes_in_tenant_values_are_shown_not_sent():
    text = status_text(_status("evil\x1b[2J\x1b]52;c;cGF3bmVk\x07\r\u202enmae"))
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text and "\u202e" not in text
    assert "evil\\x1b[2J" in text and "\\u202e" in text
    assert text.count("\n") == status_text(_status("plain")).count("\n")  # no injected lines


def test_terminal_safe_keeps_printable_text():
    assert terminal_safe("näme 名前 ok") == "näme 名前 ok"
    assert terminal_safe("a\nb\tc") == "a\\x0ab\\x09c"


def test_run_refuses_a_secret_on_the_command_line(capsys):
    rc = main(["run", "--group", "g", "--secret", "abc", "--", "true"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "--secret is refused" in err and "--secret-file" in err and "abc" not in err

