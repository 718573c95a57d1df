"""The portal's TLS certificate: the proxy serves HTTPS with it, the embedded
slapd offers it with StartTLS, and every client (the hub's LDAP bind, nslcd,
the tests, a browser) checks it against [tls] ca_cert::

    deploy/tls.sh ensure              # make the local CA and the host's certificate
                                      # when [tls] cert/key do not exist; trust the CA
    deploy/tls.sh key-copy USER FILE  # a private copy of the key for USER (0400)
    deploy/tls.sh key-copy USER FILE - # the same of the key on stdin (the proxy's
                                      # internal keys, which deploy/hub.sh reads
                                      # as the hub's account)
    deploy/tls.sh status              # the certificate's subject, names and dates

A site names its own files in [tls]; they are used as they are. When the
configured files are missing, ``ensure`` makes them: a CA (ca.key beside
ca_cert, root 0600, kept for the next certificate) and a certificate for
this host's names, localhost, 127.0.0.1 and [tls] names. A certificate that
ends within 30 days, or no longer covers those names, is made anew.
"""

import os
import pwd
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from deploy.base import DeployError, logger, main_of, make_dir, run

log = logger("tls")

# Clients that use the system's store (curl, ldap-utils, a browser's NSS
# import, Python's default context) trust the CA.
SYSTEM_CA = Path("/usr/local/share/ca-certificates/data-scientist-portal.crt")
SUBJECT = "/O=Data Scientist Portal"
DAY = 86400
USAGE = "deploy/tls.sh ensure|key-copy USER FILE [-]|status"


# ---------------------------------------------------------------- pure


def wanted_names(short, fqdn, domain, extra):
    """The names the certificate must cover, sorted: ``DNS:x`` or ``IP:x``.

    >>> wanted_names("vm", "vm", "portal.localhost", ["10.0.0.1"])
    ['DNS:*.portal.localhost', 'DNS:localhost', 'DNS:portal.localhost', 'DNS:vm', 'IP:10.0.0.1', 'IP:127.0.0.1']
    """  # noqa: E501
    names = {"DNS:localhost", "IP:127.0.0.1", f"DNS:{short}", f"DNS:{fqdn}"}
    if domain:  # the hub, and each user's sessions
        names |= {f"DNS:{domain}", f"DNS:*.{domain}"}
    for name in extra:
        ip = re.fullmatch(r"[0-9.]+", name) or ":" in name
        names.add(f"IP:{name}" if ip else f"DNS:{name}")
    return sorted(names)


def cert_names(text):
    """The names in openssl's ``-ext subjectAltName`` output, sorted."""
    lines = text.splitlines()[1:]
    names = {n.strip().replace("IP Address:", "IP:") for n in ",".join(lines).split(",")}
    return sorted(n for n in names if n)


def missing_names(wanted, have):
    return [n for n in wanted if n not in have]


# ---------------------------------------------------------------- writers


def files(settings):
    tls = settings["tls"]
    ca_cert = Path(tls["ca_cert"])
    return ca_cert, ca_cert.parent / "ca.key", Path(tls["cert"]), Path(tls["key"])


def openssl_ok(*args):
    return subprocess.run(["openssl", *args], capture_output=True).returncode == 0


def hostname(flag):
    out = subprocess.run(["hostname", flag], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def host_wanted(settings):
    short = hostname("-s")
    return wanted_names(
        short, hostname("-f") or short, settings["hub"]["domain"], settings["tls"]["names"]
    )


def names_of(cert):
    out = subprocess.run(
        ["openssl", "x509", "-in", str(cert), "-noout", "-ext", "subjectAltName"],
        capture_output=True,
        text=True,
    )
    return cert_names(out.stdout)


def nonempty(path):
    return path.is_file() and path.stat().st_size > 0


def cert_usable(settings):
    ca_cert, _, cert, key = files(settings)
    return (
        nonempty(cert)
        and nonempty(key)
        and openssl_ok("x509", "-in", str(cert), "-noout", "-checkend", str(30 * DAY))
        and openssl_ok("verify", "-CAfile", str(ca_cert), str(cert))
        and not missing_names(host_wanted(settings), names_of(cert))
    )


def with_umask(mask, argv):
    old = os.umask(mask)
    try:
        return subprocess.run(argv, stderr=subprocess.DEVNULL).returncode == 0
    finally:
        os.umask(old)


def make_ca(settings):
    ca_cert, ca_key, _, _ = files(settings)
    if nonempty(ca_cert) and nonempty(ca_key):
        if openssl_ok("x509", "-in", str(ca_cert), "-noout", "-checkend", str(365 * DAY)):
            return
    log(f"making a local CA: {ca_cert}")
    make_dir(ca_cert.parent)
    key_tmp, cert_tmp = f"{ca_key}.tmp", f"{ca_cert}.tmp"
    made = with_umask(
        0o077,
        ["openssl", "req", "-x509", "-newkey", "rsa:3072", "-nodes", "-sha256", "-days", "3650"]
        + ["-subj", f"{SUBJECT}/CN=Data Scientist Portal local CA {hostname('-s')}"]
        + ["-addext", "basicConstraints=critical,CA:TRUE"]
        + ["-addext", "keyUsage=critical,keyCertSign,cRLSign"]
        + ["-keyout", key_tmp, "-out", cert_tmp],
    )
    if not made:
        raise DeployError("openssl could not make the CA")
    os.chmod(key_tmp, 0o600)
    os.chmod(cert_tmp, 0o644)
    os.replace(key_tmp, ca_key)
    os.replace(cert_tmp, ca_cert)


def make_cert(settings):
    ca_cert, ca_key, cert, key = files(settings)
    names = ",".join(host_wanted(settings))
    log(f"making the certificate of {hostname('-s')} ({names}): {cert}")
    make_dir(cert.parent)
    make_dir(key.parent)
    with tempfile.TemporaryDirectory() as tmp:
        cn = hostname("-f") or hostname("-s")
        if not with_umask(
            0o077,
            ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-sha256"]
            + ["-subj", f"{SUBJECT}/CN={cn}", "-keyout", f"{tmp}/key", "-out", f"{tmp}/csr"],
        ):
            raise DeployError("openssl could not make a key")
        Path(tmp, "ext").write_text(
            f"subjectAltName={names}\nbasicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
        )
        signed = with_umask(
            0o022,
            ["openssl", "x509", "-req", "-in", f"{tmp}/csr", "-CA", str(ca_cert)]
            + ["-CAkey", str(ca_key), "-CAcreateserial", "-days", "825", "-sha256"]
            + ["-extfile", f"{tmp}/ext", "-out", f"{tmp}/crt"],
        )
        if not signed:
            raise DeployError("openssl could not sign the certificate")
        install = ["install", "-o", "root", "-g", "root", "-m"]
        run([*install, "0600", f"{tmp}/key", str(key)])
        run([*install, "0644", f"{tmp}/crt", str(cert)])


def trust_ca(settings):
    ca_cert = files(settings)[0]
    if SYSTEM_CA.is_file() and SYSTEM_CA.read_bytes() == ca_cert.read_bytes():
        return
    run(["install", "-m", "0644", str(ca_cert), str(SYSTEM_CA)])
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    if subprocess.run(["update-ca-certificates"], **quiet).returncode:
        log("warning: update-ca-certificates failed")
    log(f"the system trusts {ca_cert}")


def cmd_ensure(settings):
    ca_cert, ca_key, cert, _ = files(settings)
    if cert_usable(settings):
        return trust_ca(settings)
    if nonempty(cert) and not nonempty(ca_key):
        # A site's own certificate: never replaced, only checked.
        if not openssl_ok("verify", "-CAfile", str(ca_cert), str(cert)):
            raise DeployError(f"[tls] cert {cert} is not signed by [tls] ca_cert {ca_cert}")
        missing = " ".join(missing_names(host_wanted(settings), names_of(cert)))
        log(f"warning: {cert} does not cover {missing} or ends within 30 days")
        return trust_ca(settings)
    make_ca(settings)
    make_cert(settings)
    trust_ca(settings)


def key_copy(settings, user, file, key=None):
    """``file`` becomes a copy of the key (or of the bytes ``key``) that only
    ``user`` reads (``user``:root 0400), replaced only when it differs."""
    file = Path(file)
    source = Path(settings["tls"]["key"])
    if key is None and not nonempty(source):
        raise DeployError(f"no key at {source}: run deploy/tls.sh ensure")
    make_dir(file.parent)
    key = source.read_bytes() if key is None else key
    if not key:
        raise DeployError(f"key-copy: no key for {file}")
    if file.is_file() and file.read_bytes() == key:
        st = file.lstat()
        if st.st_uid == pwd.getpwnam(user).pw_uid and st.st_mode & 0o7777 == 0o400:
            return
    tmp = Path(f"{file}.tmp")
    tmp.unlink(missing_ok=True)
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
        f.write(key)
    os.chown(tmp, pwd.getpwnam(user).pw_uid, 0)
    os.chmod(tmp, 0o400)
    os.replace(tmp, file)


def cmd_key_copy(settings, *args):
    if len(args) not in (2, 3) or args[2:] not in ((), ("-",)):
        raise DeployError("usage: deploy/tls.sh key-copy USER FILE [-]")
    key_copy(settings, args[0], args[1], sys.stdin.buffer.read() if args[2:] else None)


def cmd_status(settings):
    cert = settings["tls"]["cert"]
    show = ["-noout", "-subject", "-issuer", "-dates", "-ext", "subjectAltName"]
    return subprocess.run(["openssl", "x509", "-in", cert, *show]).returncode


main = main_of({"ensure": cmd_ensure, "key-copy": cmd_key_copy, "status": cmd_status}, log, USAGE)

if __name__ == "__main__":
    sys.exit(main())
