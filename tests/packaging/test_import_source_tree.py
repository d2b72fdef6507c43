"""A source tree without its compiled C core, imported instead of a built manaka (Python run
in a clone's folder): `import manaka` is an ImportError saying so, where, and what to do,
instead of whatever fails first (a "circular import" of _core, or OpenBLAS)."""
import os
import shutil
import subprocess
import sys

from paths import ROOT


def source_copy(folder, with_core):
    """folder/manaka: the worktree's package, its compiled extensions left out unless `with_core`."""
    ignore = shutil.ignore_patterns("__pycache__", *([] if with_core else ["*.so", "*.pyd"]))
    shutil.copytree(os.path.join(ROOT, "manaka"), os.path.join(folder, "manaka"), ignore=ignore)
    return os.path.join(folder, "manaka")


def import_manaka(cwd, pythonpath):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    return subprocess.run([sys.executable, "-c", "import manaka; print(manaka.__file__)"], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=120)


def test_a_source_tree_in_the_current_folder_says_it_shadows_the_built_one(tmp_path):
    clone = tmp_path / "clone"
    package = source_copy(str(clone), with_core=False)
    r = import_manaka(str(clone), [ROOT])  # ROOT stands for the installed manaka
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: manaka: ") and package in last, r.stderr
    assert "without its compiled C core" in last and "the current folder" in last
    assert f"shadows the installed manaka in {os.path.join(ROOT, 'manaka')}" in last
    assert "run Python from another folder" in last and "build_ext --inplace" in last
    assert "circular import" not in r.stderr and "openblas" not in r.stderr.lower()
    # from elsewhere, the built one is imported
    r = import_manaka(str(tmp_path), [ROOT])
    assert r.returncode == 0 and r.stdout.strip() == os.path.join(ROOT, "manaka", "__init__.py"), r.stderr


def test_a_source_tree_on_pythonpath_without_an_install(tmp_path):
    package = source_copy(str(tmp_path / "src"), with_core=False)
    r = import_manaka(str(tmp_path), [str(tmp_path / "src")])
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode != 0 and package in last and "is on sys.path" in last, r.stderr
    assert "take " in last and "PYTHONPATH" in last and "shadows" not in last


def test_a_built_copy_imports(tmp_path):
    source_copy(str(tmp_path / "built"), with_core=True)
    r = import_manaka(str(tmp_path / "built"), [])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(tmp_path / "built" / "manaka" / "__init__.py")
