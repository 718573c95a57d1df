"""When deploy/envs.sh rebuilds an environment (deploy/envs_setup.py): the
stamps it compares, the same as those the shell version wrote, so no
environment is rebuilt for the change of script."""

import hashlib
import subprocess

from deploy.envs_setup import hub_stamp, package_stamp, requirements_stamp


def test_a_requirements_stamp_is_its_sha256_and_a_space():
    assert requirements_stamp(b"jupyterlab==4\n") == (
        hashlib.sha256(b"jupyterlab==4\n").hexdigest() + " "
    )
    assert requirements_stamp(b"a\n") != requirements_stamp(b"b\n")


def test_the_package_stamp_is_the_shells(tmp_path):
    for path, text in {
        "portal/__init__.py": "",
        "portal/core/x.py": "x = 1\n",
        "portal/__pycache__/x.pyc": "ignored",
        "spawners/s.py": "s\n",
        "setup.cfg": "[metadata]\n",
        "pyproject.toml": "",
        "README.md": "# r\n",
    }.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    shell = subprocess.run(
        "find portal spawners setup.cfg pyproject.toml README.md -type f "
        "! -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum "
        "| sha256sum | cut -d' ' -f1",
        shell=True, cwd=tmp_path, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert package_stamp(tmp_path) == shell.stdout.strip()
    before = package_stamp(tmp_path)
    (tmp_path / "portal/__pycache__/x.pyc").write_text("changed")
    assert package_stamp(tmp_path) == before
    (tmp_path / "portal/core/x.py").write_text("x = 2\n")
    assert package_stamp(tmp_path) != before


def test_the_hub_is_reinstalled_when_the_checkout_moves():
    assert hub_stamp("/work/a", b"cfg") != hub_stamp("/work/b", b"cfg")
    assert hub_stamp("/work/a", b"cfg").startswith("/work/a ")
