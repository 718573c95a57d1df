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
