"""The docs' reference pages are made from what they describe: every key of
deploy/portal.toml on the configuration page, every subcommand of ``portal``
on the command's page (portal/reference.py)."""

import re
import tomllib

import pytest

from portal import reference, settings
from portal.cli import parser


def headings(page):
    return set(re.findall(r"^#+ `([^`]+)`", page, re.M))


def test_the_configuration_page_lists_every_key_of_portal_toml():
    text = settings.DEFAULTS.read_text(encoding="utf-8")
    page = reference.config_page(text)
    shown = headings(page)
    missing = []
    for path in reference.key_paths(tomllib.loads(text), reference.inline_tables(text)):
        name = path.replace("[]", "")
        if name in shown or f"[{name}]" in shown or f"[[{name}]]" in shown:
            continue
        if any(h.strip("[]").startswith(f"{name}.") for h in shown):
            continue  # a table made only by its sub-tables' headers
        missing.append(path)
    assert not missing, f"keys of portal.toml missing from the reference: {missing}"


def test_a_key_shows_its_type_default_and_comment():
    text = '[hub]\n# Where it listens.\nbind_url = "https://0.0.0.0:8000"\n\n[[p]]\nname = "x"\n'
    page = reference.config_page(text)
    section = page.split("### `hub.bind_url`", 1)[1].split("##", 1)[0]
    assert "- Type: string" in section and '- Default: `"https://0.0.0.0:8000"`' in section
    assert "Where it listens." in section
    assert "## `[[p]]`" in page and '- Example: `"x"`' in page


def test_a_key_added_to_the_file_is_on_the_page_and_one_removed_is_not():
    text = settings.DEFAULTS.read_text(encoding="utf-8")
    added = text.replace("[hub]\n", "[hub]\n# A new key.\nportal_unit_new = 3\n", 1)
    assert "`hub.portal_unit_new`" in reference.config_page(added)
    assert "`hub.portal_unit_new`" not in reference.config_page(text)


@pytest.mark.parametrize("name", sorted(parser()._subparsers._group_actions[0].choices))
def test_the_command_page_has_every_subcommand(name):
    page = reference.command_page()
    assert f"## `portal {name}`" in page
