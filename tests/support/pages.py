"""What the browser tests look for on a page."""

import re


def dir_item(page, name):
    """The file browser's row of ``name``."""
    return page.locator(".jp-DirListing-item").filter(
        has=page.locator(".jp-DirListing-itemText", has_text=re.compile(rf"^{re.escape(name)}$"))
    )
