"""GSLICE_GROUP_SECRET_FILE: the shim reads the group secret from a file (how
Kubernetes hands it over, mounted read-only by CDI), trailing newline stripped;
it wins over GSLICE_GROUP_SECRET."""
from __future__ import annotations

from shim_harness import assert_charged_for, group_env


def test_secret_from_file_attaches(runner, tokend, tmp_path):
    admin = tokend.admin()
    created = admin.create_group("g", request=0.5, memory="1GiB")
    secret_file = tmp_path / "group-secret"
    secret_file.write_text(created.secret + "\n")
    env = group_env(tokend, "g", "", GSLICE_GROUP_SECRET_FILE=secret_file)
    del env["GSLICE_GROUP_SECRET"]
    rc, out, err = runner.run("launch", "driver", 50, 10000, **env)
    assert rc == 0, err
    assert_charged_for(admin, "g", 50 * 10000 / 1e9)   # attached with the file's secret: metered


def test_wrong_secret_file_wins_over_the_variable_and_is_refused(runner, tokend, tmp_path):
    admin = tokend.admin()
    created = admin.create_group("g", request=0.5, memory="1GiB")
    secret_file = tmp_path / "group-secret"
    secret_file.write_text("not-the-secret\n")
    # An allocation, not a launch: a process whose attach is refused never hears
    # the operator's daemon-loss policy, so its launches wait; its allocations
    # give up after GSLICE_DAEMON_WAIT_MS.
    env = group_env(tokend, "g", created.secret, GSLICE_GROUP_SECRET_FILE=secret_file, GSLICE_DAEMON_WAIT_MS=0)
    rc, out, err = runner.run("alloc", "driver", 1 << 20, 1, timeout=60, **env)
    assert rc == 0 and out["allocated"] == "0" and out["last_result"] == "2", (out, err)  # 2: OUT_OF_MEMORY
    assert "wrong secret" in err, err
    assert admin.status().group("g").tokens_granted == 0
    assert admin.status().group("g").memory_used == 0


def test_missing_secret_file_is_named_in_the_warning(runner, tokend, tmp_path):
    created = tokend.admin().create_group("g", request=0.5, memory="1GiB")
    env = group_env(tokend, "g", created.secret, GSLICE_GROUP_SECRET_FILE=tmp_path / "absent",
                    GSLICE_DAEMON_WAIT_MS=0)
    rc, out, err = runner.run("alloc", "driver", 1 << 20, 1, timeout=60, **env)
    assert f"GSLICE_GROUP_SECRET_FILE={tmp_path / 'absent'} cannot be opened" in err, err
