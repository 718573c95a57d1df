"""The docs' screenshots are the browser tests' own (issue 39): every image
in docs/screenshots/ is shown by a page of the docs or the README, every
image they show is there, and each is a shot a browser test takes
(``shot(page, NAME)`` in tests/browser/, which writes test-artifacts/NAME.png;
``make screenshots`` copies those over docs/screenshots/ after a run)."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "docs" / "screenshots"
SHOWN = re.compile(r"!\[[^\]]*\]\((?:\.\./)*(?:docs/)?screenshots/([A-Za-z0-9_.-]+\.png)\)")
SHOT = re.compile(r"""\bshot\(\s*\w+\s*,\s*(f?)["']([^"']+)["']""")


def shown():
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    return {name: page for page in pages for name in SHOWN.findall(page.read_text())}


def shot_patterns():
    """A regular expression per name a browser test gives ``shot``: an
    f-string's fields stand for any name part."""
    patterns = []
    for path in sorted((REPO / "tests" / "browser").glob("*.py")):
        for is_f, name in SHOT.findall(path.read_text()):
            parts = re.split(r"\{[^}]*\}", name) if is_f else [name]
            patterns.append(re.compile("[A-Za-z0-9_-]+".join(map(re.escape, parts)) + r"\.png"))
    return patterns


def test_every_screenshot_is_shown_and_every_shown_one_is_there():
    files = {p.name for p in SCREENSHOTS.glob("*.png")}
    assert files, SCREENSHOTS
    named = shown()
    assert sorted(files - set(named)) == [], "in docs/screenshots/ but shown by no page"
    missing = {
        name: str(page.relative_to(REPO)) for name, page in named.items() if name not in files
    }
    assert missing == {}, "shown by a page but not in docs/screenshots/"


def test_every_screenshot_is_a_browser_tests_shot():
    patterns = shot_patterns()
    assert patterns
    orphans = [
        p.name
        for p in sorted(SCREENSHOTS.glob("*.png"))
        if not any(x.fullmatch(p.name) for x in patterns)
    ]
    assert orphans == [], "no browser test takes these: they would never be brought up to date"


def test_the_checks_catch_an_unnamed_shot():
    assert not any(x.fullmatch("made-by-hand.png") for x in shot_patterns())
    assert any(x.fullmatch("journey-pytorch-test-accuracy.png") for x in shot_patterns())
