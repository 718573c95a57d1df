"""What the hub's pages (spawners/templates/) and the admin service's
(portal/service/templates/) share: the theme's CSS, inlined by both."""

from functools import cache
from pathlib import Path


@cache
def theme_css():
    """``theme.css``'s text: the colours that keep WCAG 2.1 AA contrast in
    the light and the dark theme (checked by axe-core in
    tests/browser/test_accessibility.py), the skip link and the main region."""
    return (Path(__file__).parent / "theme.css").read_text()
