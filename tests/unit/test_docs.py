"""``make docs`` builds the docs site strictly (mkdocs.yml): a broken link
between pages, a missing anchor, or a page left out of the navigation fails
the build; the reference pages are made from the code (docs/hooks.py)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def build(tmp_path, change=None):
    """``mkdocs build --strict`` of a copy of the docs, after ``change(docs)``."""
    shutil.copy(REPO / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(REPO / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("*.png"))
    (tmp_path / "docs" / "screenshots").rmdir()
    (tmp_path / "docs" / "screenshots").symlink_to(REPO / "docs" / "screenshots")
    for name in ("portal", "deploy"):
        (tmp_path / name).symlink_to(REPO / name)
    if change:
        change(tmp_path / "docs")
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f",
         str(tmp_path / "mkdocs.yml"), "-d", str(tmp_path / "site")],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip


def append(page, text):
    def change(docs):
        with open(docs / page, "a") as f:
            f.write(text)

    return change


def test_the_docs_build_with_the_reference_pages(tmp_path):
    run = build(tmp_path)
    assert run.returncode == 0, run.stderr
    config = (tmp_path / "site" / "reference" / "configuration.html").read_text()
    assert 'id="hub-bind_url"' in config and 'id="slurm-command_timeout"' in config
    command = (tmp_path / "site" / "reference" / "command.html").read_text()
    assert 'id="portal-check"' in command


@pytest.mark.parametrize(
    "change, says",
    [
        (append("index.md", "\n[gone](users/no-such-page.md)\n"), "no-such-page.md"),
        (append("index.md", "\n[gone](users/sessions.md#no-such-anchor)\n"), "no-such-anchor"),
        (lambda docs: (docs / "users" / "stray.md").write_text("# Stray\n"), "stray.md"),
    ],
    ids=["missing page", "missing anchor", "page outside the navigation"],
)
def test_a_broken_link_or_a_stray_page_fails_the_build(tmp_path, change, says):
    run = build(tmp_path, change)
    assert run.returncode != 0 and says in run.stderr, run.stderr
