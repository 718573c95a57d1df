"""What the hub's pages (spawners/templates/) and the admin service's
(portal/service/templates/) share, inlined by both: the theme's CSS and
the script that announces changed states (``live.js``)."""

from functools import cache
from pathlib import Path


@cache
def theme_css():
    """``theme.css``'s text: the colours that keep WCAG 2.1 AA contrast in
    the light and the dark theme (checked by axe-core in
    tests/browser/test_accessibility.py), the skip link and the main region."""
    return (Path(__file__).parent / "theme.css").read_text()


@cache
def live_js():
    """``live.js``'s text: ``portalLive(statusId, seconds)``, which reads the
    page again while it is shown and announces each changed ``[data-live]``
    state in the page's live region."""
    return (Path(__file__).parent / "live.js").read_text()
