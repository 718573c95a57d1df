"""axe-core (Deque's accessibility engine, from npm: deploy/testtools.sh)
run in a Playwright page, and the checked-in allowlist of what JupyterHub's
own bundled JavaScript renders that the portal's templates cannot mend
(tests/browser/axe-allowlist.json)."""

import json
import os
import re
from pathlib import Path

AXE_JS = Path(
    os.environ.get("PORTAL_AXE_JS", "/opt/portal/test-tools/node_modules/axe-core/axe.min.js")
)
ALLOWLIST = Path(__file__).resolve().parents[1] / "browser" / "axe-allowlist.json"
# WCAG 2.0 and 2.1, levels A and AA
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
BLOCKING = ("serious", "critical")

RUN = """async (tags) => {
  const result = await axe.run(document, {runOnly: {type: "tag", values: tags},
                                          resultTypes: ["violations"]});
  return result.violations.flatMap(v => v.nodes.map(n => ({
    rule: v.id, impact: n.impact || v.impact, target: n.target.join(" "),
    summary: (n.failureSummary || "").split("\\n").slice(0, 2).join(" ")})));
}"""


def violations(page, where):
    """Every WCAG A/AA violation axe-core finds in ``page`` now, one per
    element: ``{"page", "rule", "impact", "target", "summary"}``."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE_JS))
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        # a page whose Content-Security-Policy runs no script (a notebook's
        # result): the same address, as the same user, with it bypassed
        context = page.context.browser.new_context(
            bypass_csp=True, storage_state=page.context.storage_state()
        )
        try:
            again = context.new_page()
            again.goto(page.url)
            again.add_script_tag(path=str(AXE_JS))
            return [{"page": where, **v} for v in again.evaluate(RUN, TAGS)]
        finally:
            context.close()
    return [{"page": where, **v} for v in page.evaluate(RUN, TAGS)]


def load_allowlist(path=ALLOWLIST):
    """The allowlist's entries: ``{"page", "rule", "target" (a regular
    expression, whole), "why"}``."""
    entries = json.loads(Path(path).read_text())
    for entry in entries:
        missing = {"page", "rule", "target", "why"} - set(entry)
        assert not missing, f"allowlist entry {entry} lacks {sorted(missing)}"
        re.compile(entry["target"])
    return entries


def allowed(violation, entry):
    return (
        violation["page"] == entry["page"]
        and violation["rule"] == entry["rule"]
        and re.fullmatch(entry["target"], violation["target"]) is not None
    )


def judge(found, entries):
    """``(blocking, unused)``: the serious or critical violations in
    ``found`` that no entry allows, and the entries that allowed none."""
    blocking = [v for v in found if v["impact"] in BLOCKING]
    unexplained = [v for v in blocking if not any(allowed(v, e) for e in entries)]
    unused = [e for e in entries if not any(allowed(v, e) for v in blocking)]
    return unexplained, unused


def assert_accessible(page, where):
    """No serious or critical violation on ``page`` now that the allowlist
    does not explain (a page a scenario reaches that the sweep in
    tests/browser/test_accessibility.py cannot: a progress page, a job's
    result)."""
    unexplained, _ = judge(violations(page, where), load_allowlist())
    assert not unexplained, "\n".join(
        f"{v['page']}: {v['impact']} {v['rule']} at {v['target']}: {v['summary']}"
        for v in unexplained
    )
