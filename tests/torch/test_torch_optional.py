"""torch is optional: `import manaka` never imports it, and manaka.torch without it raises an
ImportError that says what to install. Runs with or without torch installed (a subprocess
hides torch by setting sys.modules['torch'] = None)."""
import os
import subprocess
import sys

from paths import ROOT


def run(code):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_import_manaka_does_not_import_torch():
    r = run("import sys, manaka, manaka.ops, manaka.bench; print('torch' in sys.modules)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_manaka_torch_without_torch_says_pip_install_torch():
    r = run("import sys; sys.modules['torch'] = None\n"
            "import manaka\n"
            "try:\n    import manaka.torch\nexcept ImportError as e:\n    print('ERR', e)\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ERR") and "pip install torch" in r.stdout, r.stdout
