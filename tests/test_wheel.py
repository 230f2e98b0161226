"""hwgen installed from its wheel works outside the source tree.

The slow test builds a wheel from a copy of the repository, installs it (without dependencies)
in a fresh venv that sees the project venv's packages through a ``.pth`` line (so the project's
own editable install, a ``.pth`` finder of its own, stays out), and runs the installed
``hwgen`` from a folder outside the repository: ``generate`` a variant, then ``compile`` an
example model. It catches a package left out of the wheel (``ModuleNotFoundError`` in the
middle of a compile), package data left out (the microcode templates), and caches written
inside the installed package.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from fusion.kernels import cache as kernel_cache
from sim import build as sim_build

ROOT = Path(__file__).resolve().parent.parent
#: Top-level packages the wheel must hold, with every subpackage and data file under them.
PACKAGES = ("hwgen", "fusion", "sim", "rtl_templates")
#: Left out of the copy the wheel is built from: local state, not sources.
LOCAL_STATE = shutil.ignore_patterns(".venv", ".git", "build", "__pycache__", "*.egg-info",
                                     ".pytest_cache", ".hypothesis", ".ruff_cache")
ENV_VARS = ("PYTHONPATH", "PYTHONHOME", "HWGEN_KERNEL_CACHE", "HWGEN_BUILD_DIR")


def test_default_folders_are_in_the_working_directory(tmp_path, monkeypatch):
    for var in ENV_VARS[2:]:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    assert kernel_cache.default_root() == tmp_path / "build" / "kernel_cache"
    assert sim_build.default_root() == tmp_path / "build" / "sim"
    monkeypatch.setenv("HWGEN_KERNEL_CACHE", str(tmp_path / "kc"))
    monkeypatch.setenv("HWGEN_BUILD_DIR", str(tmp_path / "sims"))
    assert kernel_cache.default_root() == tmp_path / "kc"
    assert sim_build.default_root() == tmp_path / "sims"


def _run(args: list[str | Path], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    if done.returncode:
        pytest.fail(f"{' '.join(map(str, args))} failed ({done.returncode}):\n"
                    f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def _build_wheel(src: Path, out: Path) -> Path:
    # With build isolation first (what `pip install .` does); without it when no index is
    # reachable, using the project venv's setuptools.
    errors = []
    for extra in ([], ["--no-build-isolation"]):
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", *extra,
                               "-w", str(out), str(src)], capture_output=True, text=True,
                              timeout=300)
        if done.returncode == 0:
            return next(out.glob("hwgen-*.whl"))
        errors.append(done.stderr[-2000:])
    pytest.fail("pip wheel failed, with and without build isolation:\n" + "\n".join(errors))


def _contents(root: Path) -> tuple[set[str], set[str]]:
    """The packages (dotted) and the data files (relative paths) under ``root``'s packages."""
    packages, data = set(), set()
    for top in PACKAGES:
        for path in (root / top).rglob("*"):
            rel = path.relative_to(root)
            if path.name == "__init__.py":
                packages.add(".".join(rel.parent.parts))
            elif path.is_file() and path.suffix not in (".py", ".pyc"):
                data.add(rel.as_posix())
    return packages, data


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh venv holding hwgen installed from a wheel; its site-packages folder."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=LOCAL_STATE)
    wheel = _build_wheel(src, tmp / "dist")
    env_dir = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", env_dir], tmp)
    python = env_dir / "bin" / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     tmp).strip())
    # The dependencies (numpy, amaranth, onnx ...) from the project venv, without running its
    # .pth files: a directory listed in a .pth file is not a site directory.
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "project_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps",
          "--no-index", wheel], tmp)
    return site


@pytest.mark.slow
def test_the_wheel_holds_every_package_and_its_data(venv):
    want_packages, want_data = _contents(ROOT)
    have_packages, have_data = _contents(venv)
    missing = sorted(want_packages - have_packages)
    assert not missing, f"packages missing from the wheel: {', '.join(missing)}"
    missing = sorted(want_data - have_data)
    assert not missing, f"package data missing from the wheel: {', '.join(missing)}"


@pytest.mark.slow
def test_the_installed_hwgen_compiles_an_example_outside_the_source_tree(venv, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    bin_dir = venv.parents[2] / "bin"
    where = _run([bin_dir / "python", "-P", "-c",
                  "import fusion, hwgen, sim, rtl_templates as r; "
                  "print(fusion.__file__, hwgen.__file__, sim.__file__, r.__file__)"],
                 tmp_path, env)
    assert all(Path(f).is_relative_to(venv) for f in where.split()), where
    hwgen = bin_dir / "hwgen"
    _run([hwgen, "generate", "--rows", "4", "--cols", "4", "--epilogue",
          "bias,requant,relu,clamp,residual", "-o", "v4"], tmp_path, env)
    _run([hwgen, "compile", ROOT / "examples" / "qdq_cnn.onnx", "--variant", "v4", "-o",
          "plan"], tmp_path, env)
    assert (tmp_path / "plan").is_dir()
    assert (tmp_path / "build" / "kernel_cache").is_dir()  # in the working directory...
    assert not list(venv.rglob("kernel_cache")), "a cache was written into site-packages"
