"""What a reader installs: a wheel built from this tree carries every file of its two
packages (the book's, with its kernels, and the emulator's, with every header,
subfolders included), as Colab's non-editable install of the notebooks' setup cell
needs."""
import pathlib
import shutil
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = [ROOT / "src" / "attnbook", ROOT / "src" / "cuda_emulator"]


def package_files():
    return {p.relative_to(package.parent).as_posix() for package in PACKAGES
            for p in package.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def test_the_wheel_carries_every_file_of_the_package(tmp_path):
    tree = tmp_path / "tree"
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tree / name)
    for package in PACKAGES:
        shutil.copytree(package, tree / "src" / package.name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                    "-w", str(tmp_path / "dist"), str(tree)],
                   check=True, capture_output=True, timeout=600)
    (wheel,) = (tmp_path / "dist").glob("attnbook-*.whl")
    with zipfile.ZipFile(wheel) as z:
        shipped = {n for n in z.namelist()
                   if n.startswith(tuple(f"{p.name}/" for p in PACKAGES))}
    missing = sorted(package_files() - shipped)
    assert not missing, f"the wheel lacks {len(missing)} files: {missing[:10]}"
    import attnbook
    assert wheel.name.startswith(f"attnbook-{attnbook.__version__}-")
