"""User names: which names the portal takes, and the host of a user's own origin.

A hub user name is the Unix account that runs the user's Slurm jobs
(``sudo -u NAME sbatch``), spelled exactly as NSS names it (``J.Smith`` runs
as ``J.Smith``, never as ``j.smith``: ``spawners.auth`` keeps the spelling).
Every check of a user name asks here, so the authenticator, the spawner,
the session extension, the admin service and the demo's purge take the same
names:

- ``SAFE``: the names the portal can hold at all, whatever a site allows:
  ASCII letters, digits and ``_ . - @``, a letter or ``_`` first, at most 64
  characters. Nothing that means something to a shell, a path (``/``, a
  leading ``.``), an LDAP DN or filter (``, = + * ( ) \\``), Slurm's user
  lists (``,``), sudo (``#``: a uid) or a command line (a leading ``-``).
- ``[hub] username_pattern``: the site's own rule within ``SAFE`` (default:
  Unix and FreeIPA logins, dots and upper case included), refused at start
  by ``check_pattern`` when it would take a name ``SAFE`` refuses.

Under ``[hub] domain`` each user's sessions are served on a host of their
own, ``host_label(NAME).DOMAIN``: the name itself when it is a plain
lower-case DNS label (``alice.portal.example.org``), else a hashed label
(``J.Smith`` -> ``u-jsmith--1530429.portal.example.org``; ``j.smith`` gets
another hash). It is JupyterHub's own "idna" subdomain scheme, except that a
name with upper case is hashed too: browsers send host names in lower case
and configurable-http-proxy matches hosts exactly, so ``JSmith.DOMAIN``
would never reach its session, and two accounts ``JSmith`` and ``jsmith``
must not share an origin.
"""

import hashlib
import re
import string

SAFE = r"[A-Za-z_][A-Za-z0-9_.@-]{0,63}"
SAFE_RE = re.compile(SAFE)
"""Use with ``fullmatch``: a name the portal can hold (``is_safe``)."""

# Names no pattern may take, each with what it would break.
DANGEROUS = (
    ("", "an empty name"),
    (".", "a path of its own"),
    ("..", "the parent folder in a path"),
    (".hidden", "a hidden file name"),
    ("-rf", "an option on a command line"),
    ("a/b", "a path"),
    ("a b", "a space (shell, sudo)"),
    ("a,b", "two users in Slurm's lists, and a DN separator"),
    ("a=b", "an LDAP DN"),
    ("a+b", "a multi-valued LDAP RDN"),
    ("a*", "an LDAP filter wildcard"),
    ("a(b)", "an LDAP filter"),
    ("a\\b", "an escape"),
    ("a;b", "a shell command separator"),
    ("a$b", "a shell expansion"),
    ("a`b`", "a shell command"),
    ("a'b", "a quote"),
    ('a"b', "a quote"),
    ("a|b", "a shell pipe"),
    ("a&b", "a shell background job"),
    ("a<b>", "a redirection and HTML"),
    ("#1000", "a uid for sudo"),
    ("1000", "a uid for Slurm and sudo"),
    ("a:b", "a passwd field separator"),
    ("a%b", "a URL escape"),
    ("a?b", "a URL query"),
    ("a#b", "a URL fragment"),
    ("a\nb", "a new line"),
    ("a\tb", "a tab"),
    ("a\x00b", "a NUL"),
    ("\u0430lice", "a look-alike letter (non-ASCII)"),
)


def is_safe(name):
    """Whether ``name`` is one the portal can hold (``SAFE``).

    >>> [is_safe(n) for n in ("alice", "J.Smith", "j_smith-2", "a@ad.example.org")]
    [True, True, True, True]
    >>> [is_safe(n) for n in ("..", "-x", "a/b", "a,b", "1000", "", None)]
    [False, False, False, False, False, False, False]
    """
    return isinstance(name, str) and SAFE_RE.fullmatch(name) is not None


def anchored(pattern):
    r"""The whole-name regular expression of a site's ``pattern`` within
    ``SAFE``, for ``re.match`` (JupyterHub's ``username_pattern`` and
    ldapauthenticator's ``valid_username_regex`` match from the start only).

    >>> rule = re.compile(anchored("^[a-z]+$"))
    >>> bool(rule.match("alice")), bool(rule.match("alice\n")), bool(rule.match("alice.x"))
    (True, False, False)
    """
    return rf"^(?={SAFE}\Z)(?:{pattern})\Z"


def check_pattern(pattern):
    """The compiled whole-name rule of ``[hub] username_pattern``; ValueError,
    naming the fix, when it is not a regular expression, when it takes a name
    that ``SAFE`` refuses for what it would break (it would look allowed,
    and be refused everywhere), or when it takes no plain login name at all.
    A pattern without a length limit is fine: ``SAFE`` caps names at 64."""
    try:
        re.compile(pattern)
    except re.error as e:
        raise ValueError(
            f"[hub] username_pattern {pattern!r} is not a regular expression ({e}): "
            r'for example "^[A-Za-z_][A-Za-z0-9_.-]{0,31}$"'
        ) from None
    site = re.compile(pattern)
    for name, why in DANGEROUS:
        if site.fullmatch(name):
            raise ValueError(
                f"[hub] username_pattern {pattern!r} accepts {name!r} ({why}), which the "
                "portal never takes as a user name: allow only ASCII letters, digits and "
                "_ . - @, with a letter or _ first"
            )
    rule = re.compile(anchored(pattern))
    if not any(rule.match(n) for n in ("alice", "Alice", "a.smith", "alice1", "a_smith")):
        raise ValueError(
            f"[hub] username_pattern {pattern!r} accepts none of alice, Alice, a.smith, "
            "alice1, a_smith: check it against your site's login names"
        )
    return rule


# a host name label: lower-case letters, digits, inner hyphens, 63 at most
_LABEL_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_STUB_CHARS = frozenset(string.ascii_lowercase + string.digits)


def host_label(name):
    """The DNS label of ``name``'s own origin under [hub] domain.

    The name itself when it is a plain lower-case label; else ``u-STUB--HASH``
    (JupyterHub's form: up to 8 of its letters and digits, then the first 7
    hex digits of its SHA-256), unique to the exact name.

    >>> host_label("alice"), host_label("bob-2")
    ('alice', 'bob-2')
    >>> host_label("J.Smith"), host_label("j.smith")
    ('u-jsmith--1530429', 'u-jsmith--b33a535')
    >>> host_label("JSmith"), host_label("a--b"), host_label("_x")
    ('u-jsmith--b1cbeea', 'u-ab--90827a2', 'u-x--a01e47c')
    """
    if "--" not in name and _LABEL_RE.fullmatch(name) and not name.isdigit():
        return name
    digest = hashlib.sha256(name.encode("utf8")).hexdigest()[:7]
    stub = "".join(c for c in name.lower() if c in _STUB_CHARS)[:8] or "x"
    return f"u-{stub}--{digest}"


def user_host(name, domain):
    """The host of ``name``'s sessions under [hub] domain ``domain``.

    >>> user_host("J.Smith", "portal.example.org")
    'u-jsmith--1530429.portal.example.org'
    """
    return f"{host_label(name)}.{domain}"
