"""Rendering of the batch script.

Jinja's sandboxed environment with strict undefined: a missing value is an
error, not an empty string. Every substituted value goes through the ``q``
filter (``shlex.quote``); the template is ours, never the user's.
"""

import shlex
from functools import cache
from pathlib import Path

from jinja2 import FileSystemLoader, StrictUndefined
from jinja2.sandbox import SandboxedEnvironment

TEMPLATES = Path(__file__).parent / "templates"


@cache
def _environment(directory):
    env = SandboxedEnvironment(
        loader=FileSystemLoader(directory),
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    return env


def render_batch_script(template="batch.sh.j2", directory=TEMPLATES, **values):
    """The batch script for ``values`` (username, summary, environment, cmd)."""
    return _environment(str(directory)).get_template(template).render(**values)
