"""The logic package imports neither pyinfra nor click: operations and the CLI call into it, never back."""

import pkgutil
import subprocess
import sys

import podkit


def test_podkit_imports_neither_pyinfra_nor_click():
    modules = [f"podkit.{m.name}" for m in pkgutil.iter_modules(podkit.__path__) if m.name != "remote"]
    code = (
        "import sys\n"
        + "".join(f"import {name}\n" for name in modules)
        + "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pyinfra', 'pyinfra_cli', 'click'))\n"
        + "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
    assert len(modules) >= 10
