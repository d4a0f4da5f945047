import pytest, time
from shim_harness import group_env, GATE_CUT

@pytest.mark.parametrize("shim_build", ["normal", GATE_CUT], indirect=True)
def test_scratch(runner, tokend, shim_build):
    admin = tokend.admin()
    created = admin.create_group("g", request=0.5, limit=1.0, memory="1GiB")
    rc, out, err = runner.run("launch", "driver", 500, 20000, "legacy", **group_env(tokend, "g", created.secret))
    st = admin.status()
    print("\nSCRATCH", shim_build.cut, rc, out, st.group("g"), st.busy_fraction)
    time.sleep(0.5)
    print("SCRATCH2", admin.status().group("g"))
