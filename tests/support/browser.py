"""Chromium as the browser tests and bench/dashboard.py drive it: Debian's,
with a HOME that trusts the portal's CA."""

import subprocess
from pathlib import Path

from tests.support.hubsettings import CA_CERT

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def trusting_home(folder):
    """A HOME whose NSS database (Chromium's trust store on Linux) trusts the
    portal's CA: the browser checks the certificate, as a site's users' do."""
    nssdb = Path(folder) / ".pki" / "nssdb"
    nssdb.mkdir(parents=True)
    db = f"sql:{nssdb}"
    subprocess.run(["certutil", "-d", db, "-N", "--empty-password"], check=True)
    subprocess.run(
        ["certutil", "-d", db, "-A", "-t", "C,,", "-n", "portal-ca", "-i", CA_CERT], check=True
    )
    return str(folder)


def stop_from_home(page, name="", timeout=30_000):
    """Press Stop on the home page's card of the session ``name`` ("" the
    main one) once the page's script is ready, and wait until the hub no
    longer lists it (the page shows itself again without that Stop)."""
    from playwright.sync_api import expect

    page.wait_for_function("window._portal_home_ready === true")
    button = page.locator(f"#stop-{name}" if name else "#stop")
    button.click()
    expect(button).to_have_count(0, timeout=timeout)
