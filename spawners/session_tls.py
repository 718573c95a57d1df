"""A session's own TLS certificate (JupyterHub's internal_ssl).

Signed by the hub's ``notebooks-ca`` for every node of the session's
partition (the node the job lands on is known only once it runs, and the
certificate travels in the batch script) and the user's own host, valid as
long as a session may run; its key, certificate and CA bundle reach the
node inside the batch script, never in a file another user can read. Its
key is ECDSA on P-256 (``new_session_key``), not certipy's RSA 2048, and
the CA is read once (``sign_pair``), not at every signature.
``SessionCerts`` gives PortalSpawner the hooks JupyterHub calls,
``create_certs`` and ``move_certs``.
"""

import asyncio
import functools
import ipaddress
import os
import socket
from datetime import UTC, datetime, timedelta
from inspect import isawaitable
from pathlib import Path

from certipy import Certipy
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID as Usage
from cryptography.x509.oid import NameOID
from tornado import web

from portal.core.profiles import MAX_HOURS
from portal.core.tlsnames import node_alt_names

from .internal_tls import hub_client_context

# Hours a session's internal TLS certificate is valid: the longest any
# session may run, extensions included (a profile's max_hours is at most
# MAX_HOURS), and an hour more; JupyterHub's own are valid for five years.
CERT_HOURS = MAX_HOURS + 1

_signing = asyncio.Lock()  # one signature at a time (each in a thread)


def new_session_key():
    """A session's private key: ECDSA on the P-256 curve (about 128-bit
    security, more than RSA 2048's 112). It is made on every spawn's path,
    before sbatch: about a millisecond, where certipy's RSA 2048 key took
    30 to 150 ms here (the prime search varies, and the hub's CPU is busy
    meanwhile), and each TLS handshake of the session (the hub's checks, the
    proxy's first request, the session's own calls to the hub) signs faster
    with it too. The notebooks-ca that signs it, and every other internal
    certificate, are JupyterHub's, unchanged."""
    return ec.generate_private_key(ec.SECP256R1())


@functools.lru_cache(maxsize=4)
def _issuer(cert_path, key_path, stamp):
    """The CA's certificate and key, parsed once per version (``stamp``) of
    their files: loading an RSA key checks it, about 20 ms, which certipy
    spent at every signature."""
    cert = x509.load_pem_x509_certificate(Path(cert_path).read_bytes())
    key = serialization.load_pem_private_key(Path(key_path).read_bytes(), password=None)
    return cert, key


def _alt_name(name):
    """``DNS:n1`` / ``IP:10.200.0.2`` (portal.core.tlsnames) as x509's."""
    kind, _, value = name.partition(":")
    if kind == "IP":
        return x509.IPAddress(ipaddress.ip_address(value))
    if kind == "DNS":
        return x509.DNSName(value)
    raise ValueError(f"unknown alt name {name!r} (DNS:NAME or IP:ADDRESS)")


def sign_pair(ca_cert_path, ca_key_path, folder, name, names, hours):
    """A new key (``new_session_key``) and its certificate as certipy's
    ``create_signed_pair`` makes them (common name ``name``, server and client
    use, ``names`` as alt names, the issuer's key id), signed by the CA of
    those files for ``hours``; written to ``folder``/``name``.key (0600) and
    .crt. ``(keyfile, certfile)``."""
    stamp = tuple(os.stat(path).st_mtime_ns for path in (ca_cert_path, ca_key_path))
    ca_cert, ca_key = _issuer(ca_cert_path, ca_key_path, stamp)
    key = new_session_key()
    now = datetime.now(UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + timedelta(hours=hours))
        .add_extension(x509.ExtendedKeyUsage([Usage.SERVER_AUTH, Usage.CLIENT_AUTH]), critical=True)
        .add_extension(x509.SubjectAlternativeName([_alt_name(n) for n in names]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),
            critical=False,
        )
    )
    cert = builder.sign(ca_key, hashes.SHA256())
    folder = Path(folder)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    keyfile, certfile = folder / f"{name}.key", folder / f"{name}.crt"
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    keyfile.unlink(missing_ok=True)  # a new file, created 0600: never readable by others
    descriptor = os.open(keyfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(descriptor, "wb") as f:
        f.write(pem)
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(keyfile), str(certfile)


async def node_addresses(poller, partition, *, max_age, timeout, log, username):
    """``{node: [address, ...]}`` of every node of ``partition``, from the
    shared sinfo (at most ``max_age`` seconds old), each name resolved here,
    as the hub and the proxy will resolve it. HTTP 503 when Slurm lists no
    node of the partition."""
    await poller.partitions_since(max_age, timeout=timeout)
    part = poller.partitions.get(partition)
    if part is None or not part.nodes:
        log.error(
            "No node of partition %s for the certificate of %s: %s",
            partition, username, poller.cluster_error or "sinfo lists none",
        )  # fmt: skip
        raise web.HTTPError(
            503,
            f"The portal could not list the nodes of partition {partition} for your "
            "session. Please try again later.",
        )
    loop = asyncio.get_running_loop()

    async def resolve(name):
        try:
            infos = await loop.getaddrinfo(name, None, type=socket.SOCK_STREAM)
        except OSError as e:
            log.warning(
                "Node %s does not resolve on the hub (%s): the certificate of %s names it "
                "by name only", name, e, username,
            )  # fmt: skip
            return []
        return sorted({info[4][0] for info in infos})

    names = [node.name for node in part.nodes]
    return dict(zip(names, await asyncio.gather(*map(resolve, names)), strict=True))


def alt_names(addresses, *, domain, extra, include_local):
    """The certificate's names: every node of ``addresses`` by name and
    address, the user's own host ``domain`` (``usernames.user_host``:
    NAME.DOMAIN, or a hashed one-label host for a name with a dot or upper
    case, always a valid DNS name; the proxy checks the session's
    certificate against it, so only this user's session can answer this
    user's requests, even at a port that another user freed),
    a site's ``extra`` (``ssl_alt_names``), and the loopback names only when
    ``include_local``; none of the hub's, which the user, who reads the key,
    could answer for."""
    names = node_alt_names(addresses)
    if domain:
        names.append(f"DNS:{domain}")
    names += [name for name in extra if name not in names]
    if include_local:
        names = ["DNS:localhost", "IP:127.0.0.1", *names]
    return names


async def sign(store_dir, username, names, trust_bundles):
    """The session's key and certificate for ``names``, signed by the
    ``notebooks-ca`` of certipy's store in ``store_dir``, valid for
    ``CERT_HOURS``: ``{"keyfile", "certfile", "cafile", "kernels_cafile"}``.
    Signed in a thread, one at a time: the signature and the files would
    hold the hub's event loop."""
    async with _signing:
        return await asyncio.to_thread(_sign, store_dir, username, names, trust_bundles)


def _sign(store_dir, username, names, trust_bundles):
    ca = Certipy(store_dir=store_dir).store.get_record("notebooks-ca")["files"]
    name = f"user-{username}"
    keyfile, certfile = sign_pair(
        ca["cert"], ca["key"], Path(store_dir) / name, name, names, CERT_HOURS
    )
    return {
        "keyfile": keyfile,
        "certfile": certfile,
        # the CAs of the session's clients and servers: the hub's and the proxy's
        "cafile": trust_bundles["notebooks-ca"],
        # and its own, for its kernels' calls to its API (the TensorBoard magic)
        "kernels_cafile": ca["cert"],
    }


def read_session_tls(paths):
    """The PEM texts of a session's TLS files (``sign``'s ``paths``) as its
    batch script writes them: ``{"key", "cert", "ca"}``, the CA bundle with
    the session's own CA (``kernels_cafile``) added. The key's file is
    removed: the hub keeps no copy."""
    key = Path(paths["keyfile"])
    tls = {
        "key": key.read_text(),
        "cert": Path(paths["certfile"]).read_text(),
        "ca": "".join(
            Path(paths[name]).read_text()
            for name in ("cafile", "kernels_cafile")
            if paths.get(name)
        ),
    }
    key.unlink()
    return tls


class SessionCerts:
    """PortalSpawner's internal TLS hooks (JupyterHub's ``internal_ssl``):
    the session's certificate, how it reaches the node, and the hub's own
    client context for its requests to the session."""

    async def create_certs(self):
        """This session's key and certificate from the hub's ``notebooks-ca``,
        as ``Spawner.create_certs``, but naming every node of its partition
        and the user's own host, and nothing else unless a site adds
        ``ssl_alt_names``; valid as long as a session may run
        (``spawners.session_tls``)."""
        addresses = await node_addresses(
            self.poller,
            self.job_slice.partition,
            max_age=self.form_sinfo_age,
            timeout=self.slurm_timeout,
            log=self.log,
            username=self.user.name,
        )
        extra = self.ssl_alt_names(self) if callable(self.ssl_alt_names) else self.ssl_alt_names
        if isawaitable(extra):
            extra = await extra
        names = alt_names(
            addresses,
            domain=getattr(self.user, "domain", ""),
            extra=extra,
            include_local=self.ssl_alt_names_include_local,
        )
        self.log.info(
            "Certificate of %s's session for %d names: %s",
            self.user.name, len(names), ";".join(names),
        )  # fmt: skip
        return await sign(
            self.internal_certs_location, self.user.name, names, self.internal_trust_bundles
        )

    async def move_certs(self, paths):
        """The session's key, certificate and CA bundle reach its node inside
        its batch script, fed to sbatch on stdin (never a command line, never
        a file another user can read): the script writes them into a new 0700
        folder of the user's in the job's own /tmp and exports
        ``JUPYTERHUB_SSL_KEYFILE``, ``_CERTFILE`` and ``_CLIENT_CA`` there.
        So no path is handed on (``get_env`` exports none), and the hub's copy
        of the key is removed."""
        self.session_tls = await asyncio.to_thread(read_session_tls, paths)
        return {}

    def hub_ssl_context(self):
        """The hub's client TLS context for its own requests to the session,
        or None without internal_ssl."""
        return hub_client_context(getattr(self.user, "settings", None))
