"""The logic package imports neither pyinfra nor click: operations and the CLI call into it, never back.

Every module of every subpackage is imported, found by walking the package, so a module that
moves into a new subpackage cannot silently drop out of the check.
"""

import pkgutil
import subprocess
import sys

import pytest

import podkit

# Shipped to the host and run there by its own Python: not imported on the controller.
REMOTE = "podkit.remote"


def podkit_modules() -> list[str]:
    return sorted(
        m.name
        for m in pkgutil.walk_packages(podkit.__path__, prefix="podkit.")
        if not m.name.startswith(REMOTE) and ".tasks." not in m.name
    )


def test_every_subpackage_is_walked():
    modules = podkit_modules()
    packages = {name.rsplit(".", 1)[0] for name in modules}
    assert {
        "podkit.host",
        "podkit.plan",
        "podkit.client",
        "podkit.client.bench",
        "podkit.client.eval",
        "podkit.runpod",
        "podkit.sandbox",
    } <= packages
    assert len(modules) >= 25


@pytest.mark.proc
def test_podkit_imports_neither_pyinfra_nor_click():
    code = (
        "import sys\n"
        + "".join(f"import {name}\n" for name in podkit_modules())
        + "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pyinfra', 'pyinfra_cli', 'click'))\n"
        + "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_no_test_double_ships_in_the_product_package():
    leaves = {name.rsplit(".", 1)[1] for name in podkit_modules()}
    assert not leaves & {"hub", "hubserver", "hub_repos", "runpod_api", "runpodserver", "netpods"}
