"""MkDocs hooks of the docs site (mkdocs.yml): the reference pages are made
from the code at each build (portal/reference.py, of the repository that
holds mkdocs.yml), never written by hand."""

import importlib
import sys
from pathlib import Path

from mkdocs.structure.files import File

PAGES = {
    "reference/configuration.md": "config_page",
    "reference/command.md": "command_page",
}


def on_files(files, config):
    repo = str(Path(config.config_file_path).resolve().parent)
    if sys.path[0] != repo:
        sys.path.insert(0, repo)
    reference = importlib.import_module("portal.reference")
    for path, page in PAGES.items():
        files.append(File.generated(config, path, content=getattr(reference, page)()))
    return files
