"""The login node's mail server (deploy/mail.sh, exim4): a message the hub's
account hands to sendmail reaches the LDAP user's mailbox, and, with no
[mail] smarthost, nothing leaves for another domain."""

import os
import smtplib
import stat
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from portal import settings

SITE = settings.load()
URI = f"ldap://127.0.0.1:{SITE['ldap']['server_port']}"
PEOPLE = f"ou=people,{SITE['ldap']['base_dn']}"
HUB_USER = SITE["hub"]["user"]
MAILBOXES = Path("/var/mail")


def ldap_mail(name):
    """The ``mail`` of the user in the directory, as ldapsearch shows it."""
    env = {**os.environ, "LDAPTLS_CACERT": SITE["tls"]["ca_cert"], "LDAPTLS_REQCERT": "demand"}
    out = subprocess.run(
        ["ldapsearch", "-x", "-ZZ", "-LLL", "-o", "ldif-wrap=no", "-H", URI,
         "-b", f"uid={name},{PEOPLE}", "-s", "base", "mail"],
        env=env, capture_output=True, text=True, timeout=20, check=True,
    )  # fmt: skip
    return [line[6:] for line in out.stdout.splitlines() if line.startswith("mail: ")]


def send_as_hub(to, subject):
    """A message from the hub's account through /usr/sbin/sendmail, as the notices will send."""
    message = (
        f"From: {settings.mail_from(SITE)}\nTo: {to}\nSubject: {subject}\n\n"
        f"Your session is running. ({subject})\n"
    )
    return subprocess.run(
        ["sudo", "-n", "-u", HUB_USER, "/usr/sbin/sendmail", "-oi", "-t"],
        input=message, capture_output=True, text=True, timeout=30,
    )  # fmt: skip


def wait_for_text(path, text, seconds=10):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.is_file() and text in path.read_text(errors="replace"):
            return True
        time.sleep(0.2)
    return False


def test_alice_has_a_mail_address_of_the_mail_domain(mail_server):
    assert ldap_mail("alice") == [f"alice@{SITE['mail']['domain']}"]


def test_the_hubs_mail_to_alice_lands_in_her_mailbox(mail_server):
    (address,) = ldap_mail("alice")
    subject = f"portal test {uuid.uuid4().hex}"
    sent = send_as_hub(address, subject)
    assert sent.returncode == 0, sent.stderr
    box = MAILBOXES / "alice"
    assert wait_for_text(box, f"Subject: {subject}\n"), f"no message in {box} within 10 s"
    st = box.stat()  # alice's alone
    assert st.st_uid == int(subprocess.check_output(["id", "-u", "alice"]))
    assert stat.S_ISREG(st.st_mode) and st.st_mode & 0o077 == 0
    text = box.read_text(errors="replace")
    assert f"Return-path: <{HUB_USER}@{SITE['mail']['domain']}>" in text


@pytest.mark.skipif(bool(SITE["mail"]["smarthost"]), reason="[mail] smarthost is set")
def test_without_a_smarthost_no_mail_leaves(mail_server):
    # over SMTP: another domain is refused at once, the mail domain taken
    with smtplib.SMTP("127.0.0.1", 25, timeout=10) as smtp:
        code, reply = smtp.ehlo()
        assert code == 250
        smtp.mail("someone@example.org")
        code, reply = smtp.rcpt("bob@example.org")
        assert code == 550 and b"relay not permitted" in reply
        code, reply = smtp.rcpt(f"bob@{SITE['mail']['domain']}")
        assert code == 250, reply
        smtp.rset()
    # through sendmail: not sent, returned to the hub's account
    subject = f"portal test {uuid.uuid4().hex}"
    outside = f"someone-{subject[-8:]}@example.org"
    sent = send_as_hub(outside, subject)
    assert sent.returncode == 0, sent.stderr
    returned = MAILBOXES / HUB_USER
    assert wait_for_text(returned, f"Subject: {subject}\n"), f"nothing returned to {returned}"
    queue = subprocess.run(["exim4", "-bp"], capture_output=True, text=True, check=True).stdout
    assert outside not in queue  # not waiting for a later try either
    log = Path("/var/log/exim4/mainlog").read_text(errors="replace")
    assert f"** {outside}" in log and "Unrouteable address" in log


def test_no_user_of_the_host_sends_as_the_portal_over_smtp(mail_server):
    """A review: bob, with a shell here, sent alice a notice "from"
    portal@ over SMTP on loopback (a phishing link in it). A sender of the
    mail domain over SMTP is refused; the portal's mail goes through
    sendmail, which names its real sender."""
    domain = SITE["mail"]["domain"]
    probe = (
        "import smtplib, sys\n"
        "with smtplib.SMTP('127.0.0.1', 25, timeout=10) as s:\n"
        "    s.ehlo()\n"
        f"    code, reply = s.mail('{HUB_USER}@{domain}')\n"
        "    print(code, reply.decode())\n"
    )
    done = subprocess.run(["sudo", "-u", "bob", "/usr/bin/python3", "-c", probe],
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stderr
    code, _, reply = done.stdout.strip().partition(" ")
    assert code == "550" and "not over SMTP" in reply, done.stdout
